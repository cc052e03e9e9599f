"""The pages in Chromium: opened from file://, no network request, no console error; the
window.glassformerViewer contract returns what the library computed; clicks on layers, heads and
the language switch redraw; screenshots show drawn canvases."""
import numpy as np
import pytest

from glassformer.cli import main
from glassformer.explain.parts import explain_part
from glassformer.models.gpt2 import GPT2Config, init_params
from glassformer.models.model import Model
from glassformer.tokenizers.char import CharTokenizer
from glassformer.viewer import inspect
from glassformer.viewer.show import show

SEED_ATOL = 1e-3      # the bar for the seed page (JSON keeps float64 digits)
PAGE_ATOL = 5e-3      # uint8 per row: off by at most max/510 < 2e-3
TEXT = "to be or not 水很清"


def tiny_model():
    tokenizer = CharTokenizer(sorted(set(TEXT)))
    cfg = GPT2Config(vocab_size=tokenizer.vocab_size, n_layer=2, n_head=4, d_model=32,
                     max_seq_len=32)
    return Model(cfg, init_params(cfg, np.random.default_rng(0)), tokenizer)


def test_seed_page_reproduces_the_seed_and_switches_to_chinese(tmp_path, open_page, drawn, capsys):
    path = tmp_path / "seed.html"
    assert main(["attention", "--html", str(path), "--lang", "en"]) == 0
    assert str(path) in capsys.readouterr().out
    watched = open_page(path)
    page = watched.page
    for mode in ("causal", "bidirectional"):
        result = explain_part("attention", {"bidirectional": mode == "bidirectional"}, seed=0)
        expected = next(s.value for s in result.forward if s.key == "weights")[0]
        shown = np.array(page.evaluate(f"window.glassformerViewer.attention(0, 0, '{mode}')"))
        assert np.abs(shown - expected).max() <= SEED_ATOL
    assert page.evaluate("document.documentElement.lang") == "en"
    page.click("#lang-zh")
    assert page.evaluate("window.glassformerViewer.lang()") == "zh"
    assert page.inner_text("h1") == "手算自注意力"
    page.evaluate("window.glassformerViewer.setLang('en')")
    assert page.inner_text("h1") == "Self-attention by hand"
    assert drawn(page, "#weights-causal")
    page.screenshot(path=tmp_path / "seed.png", full_page=True)
    assert (tmp_path / "seed.png").stat().st_size > 10_000
    watched.checked()


def test_model_page_contract_clicks_and_canvases(tmp_path, open_page, drawn):
    model = tiny_model()
    path = show(model, TEXT, tmp_path / "tiny.html", name="tiny", lang="en")
    seen = inspect(model, TEXT)
    watched = open_page(path)
    page = watched.page
    viewer = "window.glassformerViewer"
    assert page.evaluate(f"{viewer}.layers()") == [0, 1]
    assert page.evaluate(f"{viewer}.heads()") == [0, 1, 2, 3]
    groups = page.evaluate(f"{viewer}.groups()")
    assert "".join(group["text"] for group in groups) == TEXT
    tokens = page.evaluate(f"{viewer}.tokens()")
    assert [token["id"] for token in tokens] == seen.ids[0].tolist()
    for layer, head in ((0, 0), (1, 3)):
        shown = np.array(page.evaluate(f"{viewer}.attention({layer}, {head})"))
        assert np.abs(shown - seen.attentions[layer][0, head]).max() <= PAGE_ATOL
    lens = page.evaluate(f"{viewer}.logitLens(1, {len(tokens) - 1})")
    assert lens[0]["id"] == int(seen.out[0, -1].argmax())
    assert [entry["p"] for entry in lens] == sorted((entry["p"] for entry in lens), reverse=True)
    page.select_option("#layer", "1")
    assert "1" in page.inner_text("#heatmap h2")
    page.click("#head-2")
    assert "2" in page.inner_text("#heatmap h2")
    page.click("#model-grid canvas[data-layer='0'][data-head='3']")
    assert page.inner_text("#heatmap h2").endswith("3")
    page.click("#layout")
    assert "vertical" in page.get_attribute("#token-strip", "class")
    page.click(".tok[data-pos='13']")
    assert "13" in page.inner_text("#token-detail")
    page.click("#lang-zh")
    assert page.inner_text("#tokens h2") == "词元"
    for canvas in ("#head-canvas", "#heatmap-canvas", "#norms-canvas"):
        assert drawn(page, canvas)
    page.screenshot(path=tmp_path / "tiny.png", full_page=True)
    assert (tmp_path / "tiny.png").stat().st_size > 10_000
    watched.checked()


def test_encoder_page_greys_padding_and_attends_both_ways(tmp_path, open_page, drawn):
    from glassformer.models.bert import BertConfig
    from glassformer.models.bert import init_params as bert_init
    from glassformer.tokenizers.wordpiece import WordPieceTokenizer
    words = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "the", "river", "is", "clear", "水", "很", "清"]
    tokenizer = WordPieceTokenizer({word: i for i, word in enumerate(words)})
    cfg = BertConfig(vocab_size=len(words), n_layer=2, n_head=2, d_model=16, max_seq_len=16)
    model = Model(cfg, bert_init(cfg, np.random.default_rng(0)), tokenizer)
    text = "The river is clear 水很清"
    path = show(model, text, tmp_path / "bert.html", name="bert", pad_to=12)
    watched = open_page(path)
    page = watched.page
    assert page.locator(".tok.pad").count() == 12 - 9          # [CLS] 7 words [SEP], then padding
    shown = np.array(page.evaluate("window.glassformerViewer.attention(1, 0)"))
    assert shown.shape == (12, 12)
    assert np.abs(shown[:, 9:]).max() == 0.0                    # nobody reads the padding
    assert np.triu(shown[:9, :9], 1).max() > 0.01               # bidirectional: reads ahead
    assert page.evaluate("window.glassformerViewer.logitLens(0, 0)") is None
    groups = page.evaluate("window.glassformerViewer.groups()")
    assert "".join(group["text"] for group in groups) == text
    assert drawn(page, "#heatmap-canvas")
    watched.checked()
