"""The page's parts without a browser: packed attention round trip, byte-level groups and their
⟨hex⟩ labels, WordPiece groups aligned to the text, --layers/--heads parsing, one-line CLI
errors, and a page that names no URL."""
import re

import numpy as np
import pytest

from glassformer.cli import main
from glassformer.errors import GlassformerError
from glassformer.tokenizers.bpe import BPETokenizer
from glassformer.tokenizers.bytelevel import bytes_to_unicode
from glassformer.tokenizers.wordpiece import WordPieceTokenizer
from glassformer.viewer.pack import pack_layer, unpack_layer
from glassformer.viewer.page import STATIC, render_page
from glassformer.viewer.page_data import parse_selection
from glassformer.viewer.seed_page import seed_page_data
from glassformer.viewer.tokens import describe_tokens, token_groups

QUANT_ATOL = 1.0 / 510 + 1e-7   # uint8 per row: half a level of the row's maximum (<= 1)


@pytest.mark.parametrize("causal", [True, False])
def test_packed_attention_round_trips_within_half_a_level(causal):
    rng = np.random.default_rng(0)
    scores = rng.standard_normal((3, 5, 5)) * 3
    if causal:
        scores[:, np.triu_indices(5, 1)[0], np.triu_indices(5, 1)[1]] = -np.inf
    weights = np.exp(scores - scores.max(-1, keepdims=True))
    weights = (weights / weights.sum(-1, keepdims=True)).astype(np.float32)
    back = unpack_layer(pack_layer(weights, causal), 3, 5, 5, causal)
    assert np.abs(back - weights).max() <= QUANT_ATOL
    assert np.array_equal(back.argmax(-1), weights.argmax(-1))


def byte_tokenizer():
    """Single bytes only: every multi-byte character is cut into one token per byte."""
    table = bytes_to_unicode()
    return BPETokenizer.from_spelled({table[b]: b for b in range(256)}, [])


def test_byte_tokens_group_into_characters_and_show_hex_alone():
    tokenizer = byte_tokenizer()
    text = "a 水"
    ids = tokenizer.encode(text)
    assert len(ids) == 5
    tokens = describe_tokens(tokenizer, ids)
    assert [t.text for t in tokens] == ["a", " ", "⟨E6⟩", "⟨B0⟩", "⟨B4⟩"]
    groups = token_groups(tokenizer, ids)
    assert [(g.text, g.tokens) for g in groups] == [("a", [0]), (" ", [1]), ("水", [2, 3, 4])]
    cut = token_groups(tokenizer, ids[:4])                   # ends inside 水
    assert cut[-1].text == "⟨E6 B0⟩" and "\ufffd" not in "".join(g.text for g in cut)


def test_wordpiece_groups_join_back_to_the_original_text():
    vocab = {w: i for i, w in enumerate(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "hello", "world",
                                          ",", "水", "##s"])}
    tokenizer = WordPieceTokenizer(vocab)
    text = "Héllo  Worlds, 水!"
    ids = tokenizer.encode(text)
    groups = token_groups(tokenizer, ids, text)
    assert "".join(g.text for g in groups) == text
    assert groups[0].text == "" and groups[-1].text == ""   # [CLS], [SEP]


def test_selections_parse_and_reject_out_of_range():
    assert parse_selection("0,2,5-7", 8, "layers") == [0, 2, 5, 6, 7]
    assert parse_selection(None, 3, "heads") == [0, 1, 2]
    with pytest.raises(GlassformerError, match="out of range"):
        parse_selection("30", 30, "layers")
    with pytest.raises(GlassformerError, match="expected numbers"):
        parse_selection("a-b", 30, "layers")


@pytest.mark.parametrize("argv, message", [
    (["show", "--model", "smollm2", ""], "the text is empty"),
    (["show", "--model", "no-such-model", "hi"], "no-such-model"),
    (["show", "--model", "smollm2", "--out", "/no/such/folder/page.html", "hi"],
     "does not exist"),
])
def test_show_errors_are_one_line(argv, message, capsys):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_show_rejects_layers_out_of_range(tmp_path, capsys):
    from glassformer.io.pretrained import save_pretrained
    from glassformer.models.gpt2 import GPT2Config, init_params
    from glassformer.models.model import Model
    cfg = GPT2Config(vocab_size=16, n_layer=2, n_head=2, d_model=8, max_seq_len=8)
    save_pretrained(Model(cfg, init_params(cfg, np.random.default_rng(0))), tmp_path / "m")
    assert main(["show", "--model", str(tmp_path / "m"), "--layers", "5", "hi"]) == 2
    err = capsys.readouterr().err
    assert "--layers 5 is out of range" in err and err.count("\n") == 1


URL = re.compile(r"(https?:|//[a-z]|src=|href=|@import|url\()")


def test_pages_name_no_url():
    page = render_page(seed_page_data({}), title="t", lang="en", scripts=["common.js", "seed.js"])
    assert not URL.search(page)
    for asset in STATIC.iterdir():
        assert not URL.search(asset.read_text(encoding="utf-8")), asset.name


def test_png_figures_are_written(tmp_path):
    pytest.importorskip("matplotlib")
    from glassformer.models.gpt2 import GPT2Config, init_params
    from glassformer.models.model import Model
    from glassformer.tokenizers.char import CharTokenizer
    from glassformer.viewer.show import show
    tokenizer = CharTokenizer(list("ab 水"))
    cfg = GPT2Config(vocab_size=tokenizer.vocab_size, n_layer=2, n_head=2, d_model=8,
                     max_seq_len=8)
    model = Model(cfg, init_params(cfg, np.random.default_rng(0)), tokenizer)
    show(model, "ab 水", tmp_path / "page.html", name="tiny", layers="1", heads="0",
         png_dir=tmp_path)
    names = sorted(path.name for path in tmp_path.glob("*.png"))
    assert names == ["attention_L1_H0.png", "logit_lens.png", "model_view.png",
                     "residual_norms.png"]
    assert all((tmp_path / name).read_bytes()[:4] == b"\x89PNG" for name in names)


def test_a_page_past_the_size_budget_says_so(tmp_path, monkeypatch):
    from glassformer.models.gpt2 import GPT2Config, init_params
    from glassformer.models.model import Model
    from glassformer.viewer import page_data
    from glassformer.viewer.show import show
    from glassformer.tokenizers.char import CharTokenizer
    tokenizer = CharTokenizer(list("abcdefgh"))
    cfg = GPT2Config(vocab_size=8, n_layer=2, n_head=2, d_model=8, max_seq_len=8)
    model = Model(cfg, init_params(cfg, np.random.default_rng(0)), tokenizer)
    monkeypatch.setattr(page_data, "ATTENTION_BUDGET_BYTES", 100)
    with pytest.raises(GlassformerError, match="past the page budget.*e.g. --layers 0 --heads 0"):
        show(model, "abcdefgh", tmp_path / "page.html", name="tiny")
