"""`show(model, text, out, ...)`: inspect a model on a text and write its page (and PNG figures).

What `glassformer show` runs; notebooks can call it too.
"""
from __future__ import annotations

from pathlib import Path

from glassformer.errors import GlassformerError
from glassformer.models.family import ENCODER_DECODER
from glassformer.viewer.inspection import inspect
from glassformer.viewer.page import write_page
from glassformer.viewer.page_data import model_page_data, parse_selection
from glassformer.viewer.seq2seq_page import seq2seq_page_data, seq2seq_selection

MODEL_SCRIPTS = ["common.js", "experts.js", "viewer.js"]
SEQ2SEQ_SCRIPTS = ["common.js", "seq2seq.js"]


def check_request(text: str, out: str | Path, png_dir: str | Path | None = None) -> Path:
    """The checks that need no model (so the CLI fails before loading one): `out` as a Path."""
    if not text:
        raise GlassformerError("the text is empty: give at least one character to show")
    out = Path(out)
    if not out.parent.is_dir():
        raise GlassformerError(f"cannot write {out}: the folder {out.parent} does not exist")
    if png_dir is not None and not Path(png_dir).is_dir():
        raise GlassformerError(f"--png {png_dir}: the folder does not exist")
    return out


def padded(model, text: str, pad_to: int) -> tuple[list[int], list[int]]:
    """An encoder's ids for `text` with [PAD] appended up to pad_to, and its attention mask
    (what a batch of texts of different lengths looks like to BERT)."""
    if model.family.kv_layout is not None or not hasattr(model.tokenizer, "pad"):
        raise GlassformerError(f"--pad-to is for encoders with a WordPiece tokenizer (BERT); "
                               f"{model.arch} reads no padding")
    encoding = model.tokenizer.pad(model.tokenizer.encode_plus(text), pad_to)
    return encoding.ids, encoding.attention_mask


def show(model, text: str, out: str | Path, *, name: str, lang: str = "en",
         layers: str | None = None, heads: str | None = None, top_k: int = 5,
         png_dir: str | Path | None = None, pad_to: int | None = None,
         target: str | None = None) -> Path:
    """Write the page for `model` on `text` to `out`; with png_dir, the PNG figures too.

    layers, heads: selections such as "0,2,5-7" (default: all). pad_to: encoders only, append
    padding up to that many tokens (the page greys it out). An encoder-decoder reads `text` as
    its source and `target` as its output (default: its own greedy translation).
    """
    out = check_request(text, out, png_dir)
    if model.family.kind == ENCODER_DECODER:
        return show_seq2seq(model, text, out, name=name, lang=lang, layers=layers, heads=heads,
                            png_dir=png_dir, pad_to=pad_to, target=target)
    if target is not None:
        raise GlassformerError(f"--target is for encoder-decoders; {model.arch} reads one text")
    cfg = model.cfg.block_config()
    chosen_layers = parse_selection(layers, model.cfg.n_layer, "layers")
    chosen_heads = parse_selection(heads, cfg.n_head, "heads")
    if pad_to is None:
        inspection = inspect(model, text)
    else:
        ids, mask = padded(model, text, pad_to)
        inspection = inspect(model, ids, attention_mask=[mask])
    data = model_page_data(inspection, name=name, text=text, layers=chosen_layers,
                           heads=chosen_heads, k=top_k)
    if png_dir is not None:
        from glassformer.viewer.figures import write_figures  # matplotlib: the `plot` extra
        write_figures(inspection, data, png_dir)
    return write_page(out, data, title=f"glassformer · {name}", lang=lang, scripts=MODEL_SCRIPTS)


def show_seq2seq(model, source: str, out: Path, *, name: str, lang: str, layers: str | None,
                 heads: str | None, png_dir, pad_to, target: str | None) -> Path:
    """The encoder-decoder page: cross-attention (output tokens x source tokens), encoder and
    decoder self-attention (viewer/seq2seq_page.py, static/seq2seq.js)."""
    if pad_to is not None:
        raise GlassformerError("--pad-to is not available for encoder-decoders: the source is "
                               "padded only in a batch")
    if model.tokenizer is None:
        raise GlassformerError("this encoder-decoder came without a tokenizer glassformer reads "
                               "(MarianMT and BART folders use SentencePiece or BPE files): "
                               "inspect it from Python with source and target ids")
    if target == "":
        raise GlassformerError("the target is empty: give at least one token, or no --target "
                               "to see the model's own translation")
    enc_layers, dec_layers, chosen_heads = seq2seq_selection(model, layers, heads)
    inspection = inspect(model, source, target=target)
    if target is None and hasattr(model.tokenizer, "decode"):
        target_text = model.tokenizer.decode(inspection.decoder_input_ids[0, 1:].tolist())
    else:
        target_text = target
    data = seq2seq_page_data(inspection, name=name, source=source, target=target_text,
                             translated=target is None, enc_layers=enc_layers,
                             dec_layers=dec_layers, heads=chosen_heads)
    if png_dir is not None:
        from glassformer.viewer.seq2seq_figures import write_seq2seq_figures  # the `plot` extra
        write_seq2seq_figures(inspection, data, png_dir)
    return write_page(out, data, title=f"glassformer · {name}", lang=lang,
                      scripts=SEQ2SEQ_SCRIPTS)
