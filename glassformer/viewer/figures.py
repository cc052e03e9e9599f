"""The page's views as PNG figures, for papers and slides (matplotlib: the `plot` extra).

    attention_L{l}_H{h}.png   one heatmap per chosen layer and head (query rows, key columns)
    model_view.png            the grid of every chosen layer x head
    logit_lens.png            top-1 probability per layer x position, the guess written in
    residual_norms.png        ||x|| of the residual stream per layer x position

Drawn from the same page data as the HTML (page_data.py), so the figures show what the page does.
"""
from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: no window, no display needed
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib import font_manager  # noqa: E402
import numpy as np  # noqa: E402

from glassformer.errors import GlassformerError  # noqa: E402
from glassformer.viewer.inspect import Inspection  # noqa: E402

# Fonts with CJK glyphs first, so Chinese token labels are drawn, not boxes.
CJK_FONTS = ["Noto Sans CJK SC", "Noto Sans CJK JP", "Source Han Sans SC", "WenQuanYi Micro Hei",
             "PingFang SC", "Microsoft YaHei", "DejaVu Sans"]


def _labels(data: dict) -> list[str]:
    groups = {position: group["text"] for group in data["groups"] for position in group["tokens"]}
    return [tok["text"] if tok["whole"] else groups[i].strip() + "…"
            for i, tok in enumerate(data["tokens"])]


def write_figures(inspection: Inspection, data: dict, folder: str | Path) -> list[Path]:
    """Write the PNG figures into `folder` (which must exist); returns their paths."""
    folder = Path(folder)
    if not folder.is_dir():
        raise GlassformerError(f"--png {folder}: the folder does not exist")
    installed = {font.name for font in font_manager.fontManager.ttflist}
    plt.rcParams["font.family"] = [name for name in CJK_FONTS if name in installed] or ["sans-serif"]
    labels = _labels(data)
    written = []
    for layer in data["layers"]:
        for head in data["heads"]:
            weights = inspection.attentions[layer][0, head]                  # (T, S)
            written.append(_heatmap(weights, labels, f"layer {layer} · head {head}",
                                    folder / f"attention_L{layer}_H{head}.png"))
    written.append(_model_view(inspection, data, folder / "model_view.png"))
    if data["lens"] is not None:
        written.append(_lens(data, labels, folder / "logit_lens.png"))
    norms = np.asarray(data["norms"])                                        # (L + 1, T)
    written.append(_heatmap(norms, labels, "residual stream ||x|| (row 0: before layer 0)",
                            folder / "residual_norms.png", rows=None))
    return written


def _heatmap(matrix, labels, title, path, rows="labels") -> Path:
    size = max(4.0, 0.22 * len(labels) + 2.0)
    fig, ax = plt.subplots(figsize=(size, size if rows else 3.0 + 0.12 * len(matrix)))
    ax.imshow(matrix, cmap="Blues", aspect="auto")
    ax.set_xticks(range(len(labels)), labels, rotation=90, fontsize=7)
    if rows:
        ax.set_yticks(range(len(labels)), labels, fontsize=7)
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _model_view(inspection: Inspection, data: dict, path: Path) -> Path:
    layers, heads = data["layers"], data["heads"]
    fig, axes = plt.subplots(len(layers), len(heads), squeeze=False,
                             figsize=(1.1 * len(heads) + 1, 1.1 * len(layers) + 1))
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
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _lens(data: dict, labels: list[str], path: Path) -> Path:
    layers = data["lens"]["layers"]
    top_p = np.array([[p[0] for p in row["p"]] for row in layers])          # (L, T)
    fig, ax = plt.subplots(figsize=(max(5.0, 0.45 * len(labels) + 2), 0.3 * len(layers) + 2))
    ax.imshow(top_p, cmap="Blues", vmin=0.0, vmax=1.0, aspect="auto", origin="lower")
    if len(labels) <= 48:
        for layer, row in enumerate(layers):
            for position, ids in enumerate(row["ids"]):
                ax.text(position, layer, data["vocab"][str(ids[0])].strip()[:6], ha="center",
                        va="center", fontsize=6)
    ax.set_xticks(range(len(labels)), labels, rotation=90, fontsize=7)
    ax.set_ylabel("layer")
    ax.set_title("logit lens: top-1 guess and its probability")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
