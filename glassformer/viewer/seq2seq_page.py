"""The data of an encoder-decoder's page (static/seq2seq.js draws it): its three kinds of attention.

`seq2seq_page_data(inspection, ...)` returns a JSON-ready dict, batch row 0:

    kind "seq2seq", model, arch, source (text or null), target (text or null: the given target
    or the model's own translation), translated (true when the model wrote the target)
    n_enc_layer, n_dec_layer, n_head, enc_layers, dec_layers, heads (the chosen ones), S, T
    source_tokens  [{id, text, pad}]    one per source position (the columns of cross-attention)
    decoder_tokens [{id, text}]         one per decoder input (<start>, y_1 .. y_n)
    output_tokens  [{id, text}]         what each decoder position writes (y_1 .. y_n, </s>):
                                        the rows of cross- and decoder self-attention
    encoder {layer: packed (H, S, S)}   bidirectional: stored whole
    decoder {layer: packed (H, T, T)}   causal: the lower triangle only (pack.py)
    cross   {layer: packed (H, T, S)}   stored whole
"""
from __future__ import annotations

from glassformer.errors import GlassformerError
from glassformer.viewer import page_data
from glassformer.viewer.pack import pack_layer

# note: "Seq2SeqInspection" is named, not imported: its view() draws through this module.


def seq2seq_selection(model, layers: str | None, heads: str | None
                      ) -> tuple[list[int], list[int], list[int]]:
    """--layers for each stack (checked against both), --heads: (encoder, decoder, heads)."""
    cfg = model.cfg
    enc = page_data.parse_selection(layers, cfg.n_layer, "layers")
    dec = page_data.parse_selection(layers, cfg.decoder_layers, "layers")
    # note: a distilled model may have fewer decoder heads; the page shows heads both stacks have
    n_head = min(cfg.block_config().n_head, cfg.block_config("dec").n_head)
    return enc, dec, page_data.parse_selection(heads, n_head, "heads")


def _check_size(enc: list[int], dec: list[int], heads: list[int], s: int, t: int) -> None:
    size = (page_data.attention_bytes(len(enc), len(heads), s, s, False)
            + page_data.attention_bytes(len(dec), len(heads), t, t, True)
            + page_data.attention_bytes(len(dec), len(heads), t, s, False))
    if size > page_data.ATTENTION_BUDGET_BYTES:
        raise GlassformerError(
            f"the attention of {len(enc)} + {len(dec)} layers x {len(heads)} heads over {s} "
            f"source and {t} output tokens takes {size / 1e6:.1f} MB, past the page budget of "
            f"{page_data.ATTENTION_BUDGET_BYTES / 1e6:.0f} MB; choose fewer with --layers and "
            "--heads")


def _tokens(tokens) -> list[dict]:
    return [{"id": tok.id, "text": tok.text} for tok in tokens]


def seq2seq_page_data(inspection: "Seq2SeqInspection", *, name: str, source: str | None,
                      target: str | None, translated: bool, enc_layers: list[int],
                      dec_layers: list[int], heads: list[int]) -> dict:
    """Everything the encoder-decoder page shows, for batch row 0."""
    model = inspection.model
    s = inspection.source_ids.shape[1]
    t = inspection.decoder_input_ids.shape[1]
    _check_size(enc_layers, dec_layers, heads, s, t)
    pad = ~inspection.source_mask[0]
    source_tokens = [{"id": tok.id, "text": tok.text, "pad": bool(is_pad)}
                     for tok, is_pad in zip(inspection.source_tokens, pad)]
    return {
        "kind": "seq2seq", "model": name, "arch": model.arch, "source": source,
        "target": target, "translated": translated,
        "n_enc_layer": len(inspection.encoder_attentions),
        "n_dec_layer": len(inspection.decoder_attentions),
        "n_head": inspection.cross_attentions[0].shape[1],
        "enc_layers": enc_layers, "dec_layers": dec_layers, "heads": heads, "S": s, "T": t,
        "source_tokens": source_tokens,
        "decoder_tokens": _tokens(inspection.decoder_tokens),
        "output_tokens": _tokens(inspection.output_tokens),
        "encoder": {str(layer): pack_layer(inspection.encoder_attentions[layer][0][heads], False)
                    for layer in enc_layers},
        "decoder": {str(layer): pack_layer(inspection.decoder_attentions[layer][0][heads], True)
                    for layer in dec_layers},
        "cross": {str(layer): pack_layer(inspection.cross_attentions[layer][0][heads], False)
                  for layer in dec_layers},
    }
