"""Bidirectional vs causal on the model page, in Chromium: a masked-LM BERT (char vocabulary with
BERT's specials, as `train --arch bert --objective mlm` makes it) reads its text framed as
[CLS] ... [SEP] with a typed [MASK], its attention fills the whole matrix and the page says so
in English and 中文, with the share of weight each head puts on later tokens (a decoder's is 0);
its masked-LM head's guesses are shown, [MASK] outlined; a GPT-2 page's
legend says causal (the lower triangle)."""
import numpy as np

import glassformer
from glassformer.models.bert import BertConfig
from glassformer.models.bert import init_params as bert_init
from glassformer.models.gpt2 import GPT2Config
from glassformer.models.gpt2 import init_params as gpt2_init
from glassformer.models.model import Model
from glassformer.tokenizers.char import CharTokenizer
from glassformer.tokenizers.wordpiece_train import BERT_SPECIALS
from glassformer.viewer.show import show

LINE = "床前明月[MASK]，疑是地上霜。"
V = "window.glassformerViewer"
WEIGHT_GAIN = 10.0    # random weights scaled up so the attention is far from uniform


def tiny_mlm_bert():
    tokenizer = CharTokenizer(sorted(set("床前明月光，疑是地上霜。")), special_tokens=BERT_SPECIALS)
    cfg = BertConfig(vocab_size=tokenizer.vocab_size, n_layer=2, n_head=2, d_model=16,
                     max_seq_len=32, mlm_head=True)
    params = {name: p * WEIGHT_GAIN if p.ndim == 2 else p
              for name, p in bert_init(cfg, np.random.default_rng(0)).items()}
    return Model(cfg, params, tokenizer)


def test_masked_lm_bert_page_is_bidirectional_and_fills_the_mask(tmp_path, open_page, drawn):
    model = tiny_mlm_bert()
    seen = glassformer.inspect(model, LINE)
    specials = model.tokenizer.special_tokens
    ids = seen.ids[0].tolist()
    assert ids[0] == specials["[CLS]"] and ids[-1] == specials["[SEP]"]
    mask = ids.index(specials["[MASK]"])
    watched = open_page(show(model, LINE, tmp_path / "bert.html", name="tang-bert", lang="en"))
    page = watched.page
    assert [t["id"] for t in page.evaluate(f"{V}.tokens()")] == ids
    assert "".join(g["text"] for g in page.evaluate(f"{V}.groups()")) == LINE
    shown = np.array(page.evaluate(f"{V}.attention(1, 0)"))
    assert shown.shape == (len(ids), len(ids)) and np.triu(shown, 1).max() > 0.01
    assert page.get_attribute("#attention-kind", "data-kind") == "bidirectional"
    assert "every token reads every other token" in page.inner_text("#attention-kind")
    ahead = page.evaluate(f"{V}.lookAhead(1, 0)")
    expected = np.triu(seen.attentions[1][0, 0], 1).sum(-1).mean()
    assert abs(ahead - expected) <= 0.01 and ahead > 0.05
    shown_ahead = page.evaluate(f"{V}.lookAhead(0, 0)")      # the heatmap shows layer 0, head 0
    assert f"{100 * shown_ahead:.1f}%" in page.inner_text("#look-ahead")
    guesses = page.evaluate(f"{V}.maskedLM({mask})")
    assert guesses[0]["id"] == int(seen.out[0, mask].argmax())
    assert [g["p"] for g in guesses] == sorted((g["p"] for g in guesses), reverse=True)
    assert page.locator(f"#mlm-table td.final[data-pos='{mask}']").count() == 5
    page.click("#lang-zh")
    assert "双向" in page.inner_text("#attention-kind")
    assert drawn(page, "#heatmap-canvas")
    watched.checked()


def test_decoder_page_legend_says_causal_in_both_languages(tmp_path, open_page):
    tokenizer = CharTokenizer(list("abc 水"))
    cfg = GPT2Config(vocab_size=tokenizer.vocab_size, n_layer=1, n_head=2, d_model=8,
                     max_seq_len=8)
    model = Model(cfg, gpt2_init(cfg, np.random.default_rng(0)), tokenizer)
    watched = open_page(show(model, "ab 水", tmp_path / "gpt.html", name="tiny", lang="zh"))
    page = watched.page
    assert page.get_attribute("#attention-kind", "data-kind") == "causal"
    assert "下三角" in page.inner_text("#attention-kind")
    page.click("#lang-en")
    assert "lower triangle" in page.inner_text("#attention-kind")
    assert page.evaluate(f"{V}.maskedLM(0)") is None
    assert page.evaluate(f"{V}.lookAhead(0, 1)") == 0.0
    assert "0.0%" in page.inner_text("#look-ahead")
    watched.checked()
