"""The inline views of `inspect`'s results: the model page and the encoder-decoder page, framed.

    inspection.view(lang="zh", layers="0-1", heads="0", k=5) -> InlineView (glassformer/display.py)

The page is exactly `glassformer show`'s (page_data.py or seq2seq_page.py, static/*.js), so a
large model stays responsive the same way: attention travels packed (pack.py), a layer is decoded
only when a view first asks for it, and the model view draws a thumbnail only when it scrolls into
sight. Past the page's size budget, `_repr_html_` shows one line saying to pick layers and heads.
"""
from __future__ import annotations

import html

import numpy as np

from glassformer.display import InlineView, boxed, framed, resolve_lang
from glassformer.errors import GlassformerError
from glassformer.viewer.page import MODEL_SCRIPTS, SEQ2SEQ_SCRIPTS, render_page
from glassformer.viewer.page_data import model_page_data, parse_selection
from glassformer.viewer.seq2seq_page import seq2seq_page_data, seq2seq_selection

def inspection_view(inspection, *, lang: str | None = None, layers: str | None = None,
                    heads: str | None = None, k: int = 5) -> InlineView:
    """The model page of an Inspection (row 0), as show() writes it, inline."""
    lang = resolve_lang(lang)
    model = inspection.model
    chosen_layers = parse_selection(layers, len(inspection.attentions), "layers")
    chosen_heads = parse_selection(heads, inspection.attentions[0].shape[1], "heads")
    text = None
    if model.tokenizer is not None:
        text = model.tokenizer.decode(inspection.ids[0][inspection.key_mask[0]].tolist())
    data = model_page_data(inspection, name=model.arch, text=text, layers=chosen_layers,
                           heads=chosen_heads, k=k)
    page = render_page(data, title=f"glassformer · {model.arch}", lang=lang,
                       scripts=MODEL_SCRIPTS)
    return InlineView(framed(page, f"glassformer · {model.arch}"), summary(inspection))


def seq2seq_view(inspection, *, lang: str | None = None, layers: str | None = None,
                 heads: str | None = None) -> InlineView:
    """The encoder-decoder page of a Seq2SeqInspection: cross-attention, both self-attentions."""
    lang = resolve_lang(lang)
    model = inspection.model
    enc_layers, dec_layers, chosen_heads = seq2seq_selection(model, layers, heads)
    decode = getattr(model.tokenizer, "decode", None)
    source = target = None
    if decode is not None:
        source = decode(inspection.source_ids[0][inspection.source_mask[0]].tolist())
        target = decode(inspection.decoder_input_ids[0, 1:].tolist())
    data = seq2seq_page_data(inspection, name=model.arch, source=source, target=target,
                             translated=False, enc_layers=enc_layers, dec_layers=dec_layers,
                             heads=chosen_heads)
    page = render_page(data, title=f"glassformer · {model.arch}", lang=lang,
                       scripts=SEQ2SEQ_SCRIPTS)
    return InlineView(framed(page, f"glassformer · {model.arch}"), summary(inspection))


def html_or_note(make_view) -> str:
    """`make_view()`'s HTML, or one line saying why it cannot be shown (never a traceback)."""
    try:
        return make_view()._repr_html_()
    except GlassformerError as error:
        return boxed(f"<p>glassformer: {html.escape(str(error))} — call .view(layers=..., "
                     f"heads=...) to pick fewer.</p>")


def summary(inspection) -> str:
    """One line: the model, the tokens and the attention shapes."""
    model = inspection.model
    if hasattr(inspection, "cross_attentions"):
        shape = np.shape(inspection.cross_attentions[0])
        return (f"Seq2SeqInspection({model.arch}: {len(inspection.encoder_attentions)} encoder + "
                f"{len(inspection.decoder_attentions)} decoder layers, cross-attention "
                f"{shape} (B, H, T, S))")
    shape = np.shape(inspection.attentions[0])
    tokens = " ".join(repr(tok.text) for tok in inspection.tokens[:8]) \
        if model.tokenizer is not None else ""
    more = " ..." if inspection.ids.shape[1] > 8 else ""
    return (f"Inspection({model.arch}: {len(inspection.attentions)} layers, attention {shape} "
            f"(B, H, T, S); tokens {tokens}{more})")
