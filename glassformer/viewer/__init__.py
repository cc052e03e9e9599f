"""See inside a model: `inspect(model, text_or_ids)` and one offline HTML page per model and text.

    inspection.py  inspect() -> Inspection: tokens, attentions (as transformers'
                   output_attentions), hidden states, residual stream, logit lens, from the ctx
    seq2seq_inspection.py  inspect() of an encoder-decoder -> Seq2SeqInspection: encoder,
                   decoder and cross-attentions (as transformers' output_attentions)
    tokens.py      tokens as characters or ⟨hex⟩ bytes, and groups that join back to the text
    pack.py        attention as uint8 per row, lower triangle, base64
    page_data.py   what a model page holds;  seed_page.py: the seed walkthrough page's data
    page.py        the one self-contained HTML file (static/*.css, *.js inline)
    figures.py     the same views as PNG figures (matplotlib, the `plot` extra)
    seq2seq_page.py, seq2seq_figures.py   the encoder-decoder page's data and PNG figures
    interp_page.py, sae_page.py   the interpretability page (interpret/'s results: patching,
                   attribution, head scores) and an SAE's feature pages, static/interp.js

docs/viewer.md describes the page and its `window.glassformerViewer` contract.
"""
from glassformer.viewer.inspection import Inspection, LogitLens, inspect  # noqa: F401
from glassformer.viewer.seq2seq_inspection import Seq2SeqInspection  # noqa: F401
