"""`show(model, text, out, ...)`: inspect a model on a text and write its page (and PNG figures).

What `glassformer show` runs; notebooks can call it too.
"""
from __future__ import annotations

from pathlib import Path

from glassformer.errors import GlassformerError
from glassformer.viewer.inspection import inspect
from glassformer.viewer.page import write_page
from glassformer.viewer.page_data import model_page_data, parse_selection

MODEL_SCRIPTS = ["common.js", "viewer.js"]


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
         png_dir: str | Path | None = None, pad_to: int | None = None) -> Path:
    """Write the page for `model` on `text` to `out`; with png_dir, the PNG figures too.

    layers, heads: selections such as "0,2,5-7" (default: all). pad_to: encoders only, append
    padding up to that many tokens (the page greys it out).
    """
    out = check_request(text, out, png_dir)
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
