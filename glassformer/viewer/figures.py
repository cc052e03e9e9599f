"""The page's views as PNG figures, for papers and slides (matplotlib: the `plot` extra).

    attention_L{l}_H{h}.png   one heatmap per chosen layer and head (query rows, key columns)
    model_view.png            the grid of every chosen layer x head
    logit_lens.png            top-1 probability per layer x position, the guess written in
    residual_norms.png        ||x|| of the residual stream per layer x position

Drawn from the same page data as the HTML (page_data.py), so the figures show what the page does.
Figures are made with matplotlib.figure.Figure, not pyplot: no backend is chosen and no global
figure state is left behind; the CJK font stack is set only inside `rc_context`.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib import font_manager, rc_context
from matplotlib.figure import Figure

from glassformer.errors import GlassformerError
from glassformer.viewer.inspection import Inspection

# Fonts with CJK glyphs first, so Chinese token labels are drawn, not boxes.
CJK_FONTS = ["Noto Sans CJK SC", "Noto Sans CJK JP", "Source Han Sans SC", "WenQuanYi Micro Hei",
             "PingFang SC", "Microsoft YaHei", "DejaVu Sans"]
DPI = 100


def _labels(data: dict) -> list[str]:
    groups = {position: group["text"] for group in data["groups"] for position in group["tokens"]}
    return [tok["text"] if tok["whole"] else groups[i].strip() + "…"
            for i, tok in enumerate(data["tokens"])]


def png_setup(folder: str | Path) -> tuple[Path, dict]:
    """(`folder`, made if missing, a file there being one line; the matplotlib rc settings that
    draw CJK labels: the installed fonts of CJK_FONTS, else sans-serif). Every page's figures
    start here (seq2seq_figures.py too)."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise GlassformerError(f"--png {folder}: that is a file, not a folder")
    folder.mkdir(parents=True, exist_ok=True)
    installed = {font.name for font in font_manager.fontManager.ttflist}
    fonts = [name for name in CJK_FONTS if name in installed] or ["sans-serif"]
    return folder, {"font.family": fonts}


def write_figures(inspection: Inspection, data: dict, folder: str | Path) -> list[Path]:
    """Write the PNG figures into `folder` (made if missing); returns their paths."""
    folder, rc = png_setup(folder)
    labels = _labels(data)
    written = []
    with rc_context(rc):
        for layer in data["layers"]:
            for head in data["heads"]:
                weights = inspection.attentions[layer][0, head]              # (T, S)
                written.append(_heatmap(weights, labels, f"layer {layer} · head {head}",
                                        folder / f"attention_L{layer}_H{head}.png"))
        written.append(_model_view(inspection, data, folder / "model_view.png"))
        if data["lens"] is not None:
            written.append(_lens(data, labels, folder / "logit_lens.png"))
        norms = np.asarray(data["norms"])                                    # (L + 1, T)
        written.append(_heatmap(norms, labels, "residual stream ||x|| (row 0: before layer 0)",
                                folder / "residual_norms.png", square=False))
    return written


def _heatmap(matrix, labels, title, path, square=True) -> Path:
    size = max(4.0, 0.22 * len(labels) + 2.0)
    fig = Figure(figsize=(size, size if square else 3.0 + 0.12 * len(matrix)))
    ax = fig.add_subplot()
    ax.imshow(matrix, cmap="Blues", aspect="auto")
    ax.set_xticks(range(len(labels)), labels, rotation=90, fontsize=7)
    if square:
        ax.set_yticks(range(len(labels)), labels, fontsize=7)
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    return path


def _model_view(inspection: Inspection, data: dict, path: Path) -> Path:
    layers, heads = data["layers"], data["heads"]
    fig = Figure(figsize=(1.1 * len(heads) + 1, 1.1 * len(layers) + 1))
    axes = fig.subplots(len(layers), len(heads), squeeze=False)
    for row, layer in enumerate(layers):
        for col, head in enumerate(heads):
            ax = axes[row][col]
            ax.imshow(np.sqrt(inspection.attentions[layer][0, head]), cmap="Blues")
            ax.set_xticks([])
            ax.set_yticks([])
            if col == 0:
                ax.set_ylabel(f"L{layer}", fontsize=7)
            if row == 0:
                ax.set_title(f"H{head}", fontsize=7)
    fig.savefig(path, dpi=DPI)
    return path


def _lens(data: dict, labels: list[str], path: Path) -> Path:
    layers = [row for row in data["lens"]["layers"] if row is not None]   # the chosen layers
    top_p = np.array([[p[0] for p in row["p"]] for row in layers])          # (L, T)
    fig = Figure(figsize=(max(5.0, 0.45 * len(labels) + 2), 0.3 * len(layers) + 2))
    ax = fig.add_subplot()
    ax.imshow(top_p, cmap="Blues", vmin=0.0, vmax=1.0, aspect="auto", origin="lower")
    if len(labels) <= 48:  # past that the words no longer fit in their cells
        for layer, row in enumerate(layers):
            for position, ids in enumerate(row["ids"]):
                colour = "white" if row["p"][position][0] > 0.6 else "black"
                ax.text(position, layer, data["vocab"][str(ids[0])].strip()[:6], ha="center",
                        va="center", fontsize=6, color=colour)
    ax.set_xticks(range(len(labels)), labels, rotation=90, fontsize=7)
    ax.set_ylabel("layer")
    ax.set_title("logit lens: top-1 guess and its probability")
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    return path
