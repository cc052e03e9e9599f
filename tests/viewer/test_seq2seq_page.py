"""The encoder-decoder page in Chromium (`glassformer show` on a tiny saved seq2seq model with its
pair tokenizer): cross-attention with one row per output token and one column per source token,
equal to glassformer.inspect's; the encoder's bidirectional and the decoder's causal
self-attention, each with its legend in English and 中文; the model's own greedy translation
when no --target is given; no request, no console error."""
import numpy as np
import pytest

import glassformer
from glassformer.cli import main
from glassformer.io.pretrained import save_pretrained
from glassformer.models.model import Model
from glassformer.models.seq2seq import Seq2SeqConfig, init_params
from glassformer.tokenizers.pairs import BOS_ID, EOS_ID, PairTokenizer
from glassformer.viewer.show import show

PAGE_ATOL = 5e-3      # uint8 per row: off by at most max/510 < 2e-3
WEIGHT_GAIN = 25.0    # random weights scaled up so the attention is far from uniform
SOURCE, TARGET = "cats", "K AE T S"
V = "window.glassformerViewer"


def tiny_model_folder(path):
    tokenizer = PairTokenizer.from_pairs(["cats", "acts"], ["K AE T S", "AE K T S"],
                                         target_split="space")
    cfg = Seq2SeqConfig(vocab_size=tokenizer.vocab_size, max_seq_len=12, n_layer=2, n_head=2,
                        d_model=8, pad_id=0, eos_id=EOS_ID, decoder_start_id=BOS_ID)
    params = init_params(cfg, np.random.default_rng(0))
    params = {name: p * WEIGHT_GAIN if p.ndim == 2 and "tok_emb" not in name else p
              for name, p in params.items()}
    save_pretrained(Model(cfg, params, tokenizer), path)
    return glassformer.load_pretrained(path)


def test_cross_attention_page_rows_are_outputs_and_columns_are_sources(tmp_path, open_page,
                                                                        drawn, capsys):
    model = tiny_model_folder(tmp_path / "model")
    out = tmp_path / "page.html"
    assert main(["show", "--model", str(tmp_path / "model"), "--target", TARGET, "--lang", "en",
                 "--out", str(out), SOURCE]) == 0
    assert "wrote" in capsys.readouterr().out
    seen = glassformer.inspect(model, SOURCE, target=TARGET)
    watched = open_page(out)
    page = watched.page
    assert [t["text"] for t in page.evaluate(f"{V}.sourceTokens()")] == list(SOURCE)
    assert [t["text"] for t in page.evaluate(f"{V}.outputTokens()")] == TARGET.split() + ["</s>"]
    assert [t["text"] for t in page.evaluate(f"{V}.decoderTokens()")] == ["<s>"] + TARGET.split()
    assert page.evaluate(f"{V}.layers()") == {"encoder": [0, 1], "decoder": [0, 1]}
    for layer, head in ((0, 0), (1, 1)):
        cross = np.array(page.evaluate(f"{V}.attention({layer}, {head}, 'cross')"))
        assert cross.shape == (5, 4)                                      # (T outputs, S sources)
        assert np.abs(cross - seen.cross_attentions[layer][0, head]).max() <= PAGE_ATOL
        encoder = np.array(page.evaluate(f"{V}.attention({layer}, {head}, 'encoder')"))
        assert np.abs(encoder - seen.encoder_attentions[layer][0, head]).max() <= PAGE_ATOL
        assert np.triu(encoder, 1).max() > 0.01                           # reads ahead
        decoder = np.array(page.evaluate(f"{V}.attention({layer}, {head}, 'decoder')"))
        assert decoder.shape == (5, 5) and np.triu(decoder, 1).max() == 0.0
    ahead = page.evaluate(f"{V}.lookAhead(0, 0, 'encoder')")
    assert abs(ahead - np.triu(seen.encoder_attentions[0][0, 0], 1).sum(-1).mean()) <= 0.01
    assert f"{100 * ahead:.1f}%" in page.inner_text("#encoder-look-ahead")
    assert page.evaluate(f"{V}.lookAhead(0, 0, 'decoder')") == 0.0
    assert "0.0%" in page.inner_text("#decoder-look-ahead")
    most = page.evaluate(f"{V}.mostRead(1)")
    assert most == seen.cross_attentions[1][0].mean(0).argmax(-1).tolist()
    rows = page.locator("#cross-reads tr")
    assert rows.count() == 5
    assert page.get_attribute("#cross-kind", "data-kind") == "cross"
    assert page.get_attribute("#encoder-kind", "data-kind") == "bidirectional"
    assert page.get_attribute("#decoder-kind", "data-kind") == "causal"
    assert "Bidirectional" in page.inner_text("#encoder-kind")
    assert "lower triangle" in page.inner_text("#decoder-kind")
    page.click("#head-1")
    assert page.inner_text("#cross-attention h2").endswith("1")
    page.select_option("#dec-layer", "1")
    assert "1" in page.inner_text("#decoder-attention h2")
    page.click("#cross-grid canvas[data-layer='0'][data-head='0']")
    assert "Decoder layer 0" in page.inner_text("#cross-attention h2")
    page.click("#lang-zh")
    assert "双向" in page.inner_text("#encoder-kind")
    assert "下三角" in page.inner_text("#decoder-kind")
    assert "交叉注意力" in page.inner_text("#cross-attention h2")
    for canvas in ("#cross-canvas", "#encoder-canvas", "#decoder-canvas"):
        assert drawn(page, canvas)
    watched.checked()


def test_without_a_target_the_page_shows_the_models_own_translation(tmp_path, open_page):
    model = tiny_model_folder(tmp_path / "model")
    out = show(model, SOURCE, tmp_path / "own.html", name="tiny")
    # a random model never writes </s>: it runs to the limit that leaves room for one more row
    translated = glassformer.translate(model, [model.tokenizer.encode(SOURCE)],
                                       max_new_tokens=model.cfg.max_seq_len - 1)[0]
    seen = glassformer.inspect(model, SOURCE)
    watched = open_page(out)
    page = watched.page
    assert [t["id"] for t in page.evaluate(f"{V}.decoderTokens()")] == [BOS_ID] + translated
    outputs = [t["id"] for t in page.evaluate(f"{V}.outputTokens()")]
    assert outputs[:-1] == translated                        # greedy: argmax is its next input
    assert outputs[-1] == int(seen.out[0, -1].argmax())      # what it would write next
    assert "greedy translation" in page.inner_text("#output-note")
    watched.checked()


@pytest.mark.parametrize("argv, message", [
    (["--target", "", SOURCE], "the target is empty"),
    (["--pad-to", "9", SOURCE], "not available for encoder-decoders"),
    (["--layers", "2", SOURCE], "--layers 2 is out of range"),
    (["--target", "K ZZ", SOURCE], "'ZZ' at position 1 is not in the vocabulary"),
    (["cats" * 4], "longer than the model's context"),
])
def test_encoder_decoder_show_errors_are_one_line(argv, message, tmp_path, capsys):
    tiny_model_folder(tmp_path / "model")
    assert main(["show", "--model", str(tmp_path / "model"), "--out", str(tmp_path / "p.html"),
                 *argv]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_a_model_without_a_tokenizer_is_one_line(tmp_path, capsys):
    cfg = Seq2SeqConfig(vocab_size=9, max_seq_len=8, n_layer=1, n_head=2, d_model=8)
    save_pretrained(Model(cfg, init_params(cfg, np.random.default_rng(0))), tmp_path / "m")
    assert main(["show", "--model", str(tmp_path / "m"), "--out", str(tmp_path / "p.html"),
                 "hi"]) == 2
    err = capsys.readouterr().err
    assert "without a tokenizer" in err and err.count("\n") == 1


def test_png_figures_of_the_three_kinds(tmp_path):
    pytest.importorskip("matplotlib")
    tiny_model_folder(tmp_path / "model")
    assert main(["show", "--model", str(tmp_path / "model"), "--out", str(tmp_path / "p.html"),
                 "--layers", "1", "--heads", "0", "--png", str(tmp_path), SOURCE]) == 0
    names = sorted(path.name for path in tmp_path.glob("*.png"))
    assert names == ["cross_L1_H0.png", "decoder_L1_H0.png", "encoder_L1_H0.png"]
    assert all((tmp_path / name).read_bytes()[:4] == b"\x89PNG" for name in names)


def test_png_figures_past_their_budget_are_one_line_before_drawing(tmp_path, capsys):
    """--max-png-mpixels holds for the encoder-decoder's figures too (the longer of the source
    and the decoder's tokens sets the side), refused before any figure is drawn."""
    tiny_model_folder(tmp_path / "model")
    pngs = tmp_path / "figures"
    assert main(["show", "--model", str(tmp_path / "model"), "--out", str(tmp_path / "p.html"),
                 "--png", str(pngs), "--max-png-mpixels", "0.01", SOURCE]) == 2
    err = capsys.readouterr().err
    assert "--max-png-mpixels" in err and err.count("\n") == 1
    assert not list(tmp_path.rglob("*.png")) and not (tmp_path / "p.html").exists()
