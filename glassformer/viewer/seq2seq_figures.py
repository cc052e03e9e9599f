"""An encoder-decoder page's views as PNG figures (matplotlib: the `plot` extra), one per chosen
layer and head:

    cross_L{l}_H{h}.png     cross-attention: rows = output tokens, columns = source tokens
    encoder_L{l}_H{h}.png   the encoder's self-attention (bidirectional: the whole square)
    decoder_L{l}_H{h}.png   the decoder's self-attention (causal: the lower triangle)

Drawn from the inspection and the page's data (seq2seq_page.py), with figures.py's folder and
CJK fonts (`png_setup`).
"""
from __future__ import annotations

from pathlib import Path

from matplotlib import rc_context
from matplotlib.figure import Figure

from glassformer.viewer.figures import DPI, png_setup
from glassformer.viewer.seq2seq_inspection import Seq2SeqInspection


def write_seq2seq_figures(inspection: Seq2SeqInspection, data: dict, folder: str | Path
                          ) -> list[Path]:
    """Write the PNG figures into `folder` (made if missing); returns their paths."""
    folder, rc = png_setup(folder)
    source = [tok["text"] for tok in data["source_tokens"]]
    outputs = [tok["text"] for tok in data["output_tokens"]]
    inputs = [tok["text"] for tok in data["decoder_tokens"]]
    # (file name, title, weights per layer, row labels, column labels, layers)
    kinds = [("cross", "cross-attention", inspection.cross_attentions, outputs, source,
              data["dec_layers"]),
             ("encoder", "encoder self-attention (bidirectional)",
              inspection.encoder_attentions, source, source, data["enc_layers"]),
             ("decoder", "decoder self-attention (causal)", inspection.decoder_attentions,
              outputs, inputs, data["dec_layers"])]
    written = []
    with rc_context(rc):
        for name, title, weights, rows, cols, layers in kinds:
            for layer in layers:
                for head in data["heads"]:
                    written.append(_heatmap(weights[layer][0, head], rows, cols,
                                            f"{title} · layer {layer} · head {head}",
                                            folder / f"{name}_L{layer}_H{head}.png"))
    return written


def _heatmap(matrix, rows: list[str], cols: list[str], title: str, path: Path) -> Path:
    fig = Figure(figsize=(max(4.0, 0.25 * len(cols) + 2.0), max(3.0, 0.25 * len(rows) + 2.0)))
    ax = fig.add_subplot()
    ax.imshow(matrix, cmap="Blues", vmin=0.0, vmax=1.0, aspect="auto")
    ax.set_xticks(range(len(cols)), cols, rotation=90, fontsize=7)
    ax.set_yticks(range(len(rows)), rows, fontsize=7)
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    return path
