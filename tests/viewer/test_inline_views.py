"""Rich display in Jupyter, without a browser: what inspect, trace, walkthrough, tokenize,
fill_mask and translate return has a readable __repr__ and a _repr_html_ that holds everything
inline (no URL), with ids of its own, in the language asked for or the locale's
(tests/notebooks/ draws them in Chromium)."""
import html
import re

import numpy as np
import pytest

import glassformer
from glassformer.errors import GlassformerError
from glassformer.models.bert import BertConfig
from glassformer.models.bert import init_params as bert_init
from glassformer.models.gpt2 import GPT2Config
from glassformer.models.gpt2 import init_params as gpt2_init
from glassformer.models.model import Model
from glassformer.models.seq2seq import Seq2SeqConfig
from glassformer.models.seq2seq import init_params as seq2seq_init
from glassformer.tokenizers.char import CharTokenizer
from glassformer.tokenizers.pairs import BOS_ID, EOS_ID, PairTokenizer
from glassformer.tokenizers.wordpiece_train import BERT_SPECIALS
from glassformer.viewer import page_data

TEXT = "to be 水很清"
SEED_ROW_1 = (0.4994, 0.5006)   # the seed's causal weights, row 1, as it prints them (4 decimals)


def tiny_gpt2():
    tokenizer = CharTokenizer(sorted(set(TEXT)))
    cfg = GPT2Config(vocab_size=tokenizer.vocab_size, n_layer=2, n_head=2, d_model=16,
                     max_seq_len=32)
    return Model(cfg, gpt2_init(cfg, np.random.default_rng(0)), tokenizer)


def page_of(markup: str) -> str:
    """The page inside a framed view's srcdoc."""
    found = re.search(r'srcdoc="([^"]*)"', markup)
    assert found, markup[:200]
    return html.unescape(found.group(1))


def assert_offline(markup: str):
    assert "http://" not in markup and "https://" not in markup and " src=" not in markup


def test_inspection_draws_the_model_page_in_a_frame_of_its_own(monkeypatch):
    monkeypatch.setenv("LC_ALL", "zh_CN.UTF-8")
    seen = glassformer.inspect(tiny_gpt2(), TEXT)
    assert repr(seen).startswith("Inspection(gpt2: 2 layers, attention (1, 2, 9, 9)")
    first, second = seen._repr_html_(), seen._repr_html_()
    ids = re.findall(r'<iframe id="([^"]+)"', first + second)
    assert len(ids) == 2 and ids[0] != ids[1]          # two outputs, two ids
    page = page_of(first)
    assert '<html lang="zh">' in page and "window.glassformerViewer" in page
    assert '"kind":"model"' in page and "水很清" in page
    assert_offline(first)
    assert '<html lang="en">' in page_of(seen.view(lang="en", layers="1", heads="0")._repr_html_())


def test_a_page_past_the_budget_is_one_line_not_a_traceback(monkeypatch):
    monkeypatch.setattr(page_data, "ATTENTION_BUDGET_BYTES", 10)
    seen = glassformer.inspect(tiny_gpt2(), TEXT)
    markup = seen._repr_html_()
    assert "past the page budget" in markup and "<iframe" not in markup
    with pytest.raises(GlassformerError, match="past the page budget"):
        seen.view()


def test_trace_is_explains_run_and_its_page():
    trace = glassformer.trace("attention")
    assert np.round(trace["weights"][0, 1, :2].astype(float), 4).tolist() == list(SEED_ROW_1)
    assert repr(trace) == trace.text()
    assert "Wq" in trace.text("en") and trace.check.max_rel_err < 1e-6
    page = page_of(trace.view(lang="en")._repr_html_())
    assert '"kind":"trace"' in page and '"modes":{"attention"' in page
    with pytest.raises(KeyError, match="no step 'nope'"):
        trace["nope"]
    norm = glassformer.trace("rms_norm", grad="random")
    assert norm.check.ok and norm.keys()[0] == "x"


def test_walkthrough_is_the_seed_page_inline():
    view = glassformer.walkthrough(lang="zh")
    assert "0.4994 0.5006 0.0000" in repr(view)
    page = page_of(view._repr_html_())
    assert '"kind":"seed"' in page and '<html lang="zh">' in page
    assert_offline(view._repr_html_())


def test_tokenize_shows_bytes_of_cut_characters(monkeypatch):
    monkeypatch.setenv("LC_ALL", "en_US.UTF-8")
    tokenizer = glassformer.load_tokenizer("gpt2")
    seen = glassformer.tokenize(tokenizer, "水很清 hi")
    assert seen.ids == tokenizer.encode("水很清 hi")
    assert "".join(group.text for group in seen.groups) == "水很清 hi"
    assert seen.tokens[0].text == "⟨E6 B0⟩" and not seen.tokens[0].whole
    assert repr(seen).startswith(f"Tokenization({len(seen.ids)} tokens: ⟨E6 B0⟩")
    markup = seen._repr_html_()
    assert markup.count('class="gf-token"') == len(seen.ids) and "bytes e6 b0" in markup
    assert "个词元" in seen.view(lang="zh")._repr_html_()
    assert "<script" not in markup


def test_fill_mask_is_still_its_list_and_draws_bars():
    tokenizer = CharTokenizer(sorted(set("床前明月光")), special_tokens=BERT_SPECIALS)
    cfg = BertConfig(vocab_size=tokenizer.vocab_size, n_layer=1, n_head=2, d_model=16,
                     max_seq_len=16, mlm_head=True)
    model = Model(cfg, bert_init(cfg, np.random.default_rng(0)), tokenizer)
    guesses = glassformer.fill_mask(model, "床前[MASK]月", top_k=2)
    assert guesses == [list(guesses[0])] and isinstance(guesses, list)
    assert repr(guesses) == repr([list(guesses[0])])
    markup = guesses.view(lang="zh")._repr_html_()
    assert "第 1 个 [MASK]" in markup and markup.count("<tr>") == 2


def test_translate_is_still_a_str_and_shows_its_source():
    tokenizer = PairTokenizer.from_pairs(["cats"], ["K AE T S"], target_split="space")
    cfg = Seq2SeqConfig(vocab_size=tokenizer.vocab_size, max_seq_len=8, n_layer=1, n_head=2,
                        d_model=8, pad_id=0, eos_id=EOS_ID, decoder_start_id=BOS_ID)
    model = Model(cfg, seq2seq_init(cfg, np.random.default_rng(0)), tokenizer)
    out = glassformer.translate(model, "cats", max_new_tokens=3)
    assert isinstance(out, str) and out.source == "cats" and repr(out) == repr(str(out))
    assert "原文" in out.view(lang="zh")._repr_html_()
    seen = glassformer.inspect(model, "cats", target=str(out) or None)
    assert repr(seen).startswith("Seq2SeqInspection(transformer: 1 encoder + 1 decoder")
    assert '"kind":"seq2seq"' in page_of(seen.view(lang="en")._repr_html_())


def test_a_language_other_than_en_or_zh_is_one_line():
    with pytest.raises(GlassformerError, match="expected lang 'en' or 'zh', got 'fr'"):
        glassformer.walkthrough(lang="fr")
