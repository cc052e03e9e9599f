"""`show(model, text, out, ...)`: inspect a model on a text and write its page (and PNG figures).

What `glassformer show` runs; notebooks can call it too.

Budgets before work (issue 32): a decoder's text is tokenized first, and before the forward runs
`show` refuses, in one line, a text past the model's context, a page past its attention budget
(page_data.check_page_budget: naming --layers and --heads values that fit) and PNG figures past
PNG_MAX_PIXELS (a default `show --max-png-mpixels` raises); then the forward keeps only the chosen layers (inspection.py), so a long text on a
large model costs about one layer's attention, not all of them.

The page budget bounds the page, not the process: `--max-page-mb 4000` on a 4,000-token text let
the forward keep 30 layers x 9 heads of (T, T) weights and passed 8 GB. So `show_memory_bytes`
estimates the whole command (the chosen layers' attention and activations, the logit lens's
chunk, the page's copies) and `check_memory` (glassformer/memory.py) refuses it past half the
machine, before the forward runs.
"""
from __future__ import annotations

from pathlib import Path

from glassformer.errors import GlassformerError
from glassformer.memory import check_memory
from glassformer.models.family import ENCODER_DECODER
from glassformer.models.family import CAUSAL, ENCODER
from glassformer.viewer.inspection import inspect
from glassformer.viewer.tokens import check_text
from glassformer.viewer.page import MODEL_SCRIPTS, SEQ2SEQ_SCRIPTS, write_page
from glassformer.viewer.page_data import (attention_bytes, check_page_budget, model_page_data,
                                          parse_selection)
from glassformer.viewer.seq2seq_page import seq2seq_page_data, seq2seq_selection

# The largest figure matplotlib is asked to draw (RGBA: 4 bytes a pixel, so ~400 MB); the
# figures grow with the token count (figures.py: 0.22 inch a token at DPI).
PNG_MAX_PIXELS = 100_000_000
PNG_INCHES_PER_TOKEN = 0.22
PNG_DPI = 100
# While the page is written its attention is held about this many times: the packed arrays,
# their base64 text, the page's JSON and the HTML file's text.
PAGE_COPIES = 4
# Floats one layer's forward keeps per position and channel (residual, norms, q/k/v, MLP: the
# count train's memory check uses), and copies of its (H, T, S) attention (scores and weights).
ACTIVATION_FLOATS_PER_CHANNEL = 16
ATTENTION_COPIES = 2
LENS_CHUNK_T = 128   # the logit lens's positions at once (inspection.py CHUNK_T)


def check_request(text: str, out: str | Path, png_dir: str | Path | None = None) -> Path:
    """The checks that need no model (so the CLI fails before loading one): `out` as a Path."""
    if not text:
        raise GlassformerError("the text is empty: give at least one character to show")
    out = Path(out)
    if not out.parent.is_dir():
        raise GlassformerError(f"cannot write {out}: the folder {out.parent} does not exist")
    if png_dir is not None and Path(png_dir).exists() and not Path(png_dir).is_dir():
        raise GlassformerError(f"--png {png_dir}: that is a file, not a folder")
    return out


def check_png_budget(t: int, max_pixels: int | None = None) -> None:
    """One line when the figures of a t-token text would pass max_pixels (default
    PNG_MAX_PIXELS; `show --max-png-mpixels`): a square heatmap of 0.22 inch a token, so 3,000
    tokens would be 66,200 pixels a side. The line names the flag and a value that fits."""
    max_pixels = PNG_MAX_PIXELS if max_pixels is None else max_pixels
    side = int((max(4.0, PNG_INCHES_PER_TOKEN * t + 2.0)) * PNG_DPI)
    if side * side <= max_pixels:
        return
    fits = max(0, int((max_pixels ** 0.5 / PNG_DPI - 2.0) / PNG_INCHES_PER_TOKEN))
    needed = -(-side * side // 1_000_000)   # megapixels, rounded up
    raise GlassformerError(f"--png: the figures of {t} tokens would be {side:,} x {side:,} pixels "
                           f"({4 * side * side / 1e9:.1f} GB to draw); figures fit texts of up "
                           f"to {fits} tokens: shorten the text, or leave out --png, or raise "
                           f"the budget of {max_pixels / 1e6:g} M pixels with "
                           f"--max-png-mpixels {needed}")


def png_budget_pixels(max_png_mpixels: float | None) -> int | None:
    """`show --max-png-mpixels` as a pixel count (None: the default), refused unless > 0."""
    if max_png_mpixels is None:
        return None
    if not max_png_mpixels > 0.0:   # (NaN too)
        raise GlassformerError(f"--max-png-mpixels must be more than 0, got {max_png_mpixels}")
    return int(max_png_mpixels * 1e6)


def show_memory_bytes(model, n_layers: int, t: int, page_bytes: int) -> int:
    """Rough bytes `show` takes on a t-token text keeping n_layers layers, for a page whose
    attention is page_bytes (page_data.attention_bytes): see the module docstring."""
    cfg = model.cfg
    n_head = cfg.block_config().n_head
    attention = ATTENTION_COPIES * 4 * n_layers * n_head * t * t          # (H, T, T) per layer
    activations = ACTIVATION_FLOATS_PER_CHANNEL * 4 * n_layers * t * cfg.d_model
    lens = 3 * 4 * min(t, LENS_CHUNK_T) * cfg.vocab_size                   # (chunk, V) logits
    return attention + activations + lens + PAGE_COPIES * page_bytes


def check_context(model, t: int) -> None:
    """A text longer than the model's context is refused before the forward."""
    if t > model.context_len:
        raise GlassformerError(f"the text is {t} tokens, past this model's context of "
                               f"{model.context_len}: shorten it")


def padded(model, text: str, pad_to: int) -> tuple[list[int], list[int]]:
    """An encoder's ids for `text` with [PAD] appended up to pad_to, and its attention mask
    (what a batch of texts of different lengths looks like to BERT)."""
    if model.family.kind != ENCODER or not hasattr(model.tokenizer, "pad"):
        raise GlassformerError(f"--pad-to is for encoders with a WordPiece tokenizer (BERT); "
                               f"{model.arch} reads no padding")
    encoding = model.tokenizer.pad(model.tokenizer.encode_plus(text), pad_to)
    return encoding.ids, encoding.attention_mask


def show(model, text: str, out: str | Path, *, name: str, lang: str = "en",
         layers: str | None = None, heads: str | None = None, top_k: int = 5,
         png_dir: str | Path | None = None, pad_to: int | None = None,
         target: str | None = None, max_page_mb: float | None = None,
         max_png_mpixels: float | None = None) -> Path:
    """Write the page for `model` on `text` to `out`; with png_dir, the PNG figures too.

    layers, heads: selections such as "0,2,5-7" (default: all). pad_to: encoders only, append
    padding up to that many tokens (the page greys it out). An encoder-decoder reads `text` as
    its source and `target` as its output (default: its own greedy translation). max_page_mb:
    a decoder's or encoder's page budget for its attention (default page_data's 12 MB).
    max_png_mpixels: the largest PNG figure, in millions of pixels (default PNG_MAX_PIXELS).
    """
    out = check_request(text, out, png_dir)
    if model.family.kind == ENCODER_DECODER:
        return show_seq2seq(model, text, out, name=name, lang=lang, layers=layers, heads=heads,
                            png_dir=png_dir, pad_to=pad_to, target=target,
                            max_pixels=png_budget_pixels(max_png_mpixels))
    if target is not None:
        raise GlassformerError(f"--target is for encoder-decoders; {model.arch} reads one text")
    cfg = model.cfg.block_config()
    if max_page_mb is not None and not max_page_mb > 0.0:   # (NaN too)
        raise GlassformerError(f"--max-page-mb must be more than 0, got {max_page_mb}")
    budget = None if max_page_mb is None else int(max_page_mb * 1e6)
    max_pixels = png_budget_pixels(max_png_mpixels)
    chosen_layers = parse_selection(layers, model.cfg.n_layer, "layers")
    chosen_heads = parse_selection(heads, cfg.n_head, "heads")
    if pad_to is not None:
        ids, mask = padded(model, text, pad_to)
    elif model.family.kind == CAUSAL:
        check_text(model, text, empty="the text is empty: give at least one character to show")
        ids, mask = model.tokenizer.encode(text), None
    else:
        ids, mask = text, None   # an encoder frames it itself (inspection.py)
    if not isinstance(ids, str):
        check_context(model, len(ids))
        causal = model.family.kind == CAUSAL
        check_page_budget(chosen_layers, chosen_heads, len(ids), len(ids), causal, budget)
        page = attention_bytes(len(chosen_layers), len(chosen_heads), len(ids), len(ids),
                               causal)
        check_memory(show_memory_bytes(model, len(chosen_layers), len(ids), page),
                     f"show on {len(ids):,} tokens ({len(chosen_layers)} layers x "
                     f"{len(chosen_heads)} heads, a page of {page / 1e6:,.0f} MB)",
                     "lower --max-page-mb, choose fewer --layers and --heads, or shorten the "
                     "text")
        if png_dir is not None:
            check_png_budget(len(ids), max_pixels)
    inspection = inspect(model, ids, attention_mask=None if mask is None else [mask],
                         layers=chosen_layers)
    data = model_page_data(inspection, name=name, text=text, layers=chosen_layers,
                           heads=chosen_heads, k=top_k, budget=budget)
    if png_dir is not None:
        from glassformer.viewer.figures import write_figures  # matplotlib: the `plot` extra
        write_figures(inspection, data, png_dir)
    return write_page(out, data, title=f"glassformer · {name}", lang=lang, scripts=MODEL_SCRIPTS)


def show_seq2seq(model, source: str, out: Path, *, name: str, lang: str, layers: str | None,
                 heads: str | None, png_dir, pad_to, target: str | None,
                 max_pixels: int | None = None) -> Path:
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
        # the figures' largest side: the longer of the source and the decoder's tokens
        check_png_budget(max(inspection.source_ids.shape[1],
                             inspection.decoder_input_ids.shape[1]), max_pixels)
        from glassformer.viewer.seq2seq_figures import write_seq2seq_figures  # the `plot` extra
        write_seq2seq_figures(inspection, data, png_dir)
    return write_page(out, data, title=f"glassformer · {name}", lang=lang,
                      scripts=SEQ2SEQ_SCRIPTS)
