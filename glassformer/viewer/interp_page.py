"""The interpretability page (static/interp.js draws it): a patching heat-map, a logit-attribution
bar chart, head-score grids and an SAE's features, each a section when its data is there.

`interp_page_data(model_name, patching=..., attribution=..., heads=..., sae=...)` is the page's
JSON; each argument is the dict one of the functions below makes from interpret/'s results:

    patching_section(result, tokens, ...)     interpret.patching.Patching -> tables of
                                              normalised values (L, T) or (L, H), peaks named
    attribution_section(result, ...)          interpret.attribution.Attribution -> every term,
                                              and a layers x (heads + MLP) grid of the same values
    heads_section(scores, ...)                {kind: (L, H) scores} -> grids, heads above named
    (sae_page.sae_section)                    an SAE's features: top contexts and logit effect

`glassformer patch|attribute|heads --html OUT` and `glassformer sae features --html OUT` write
it; `interp_view(data)` shows the same page inline in a notebook.
"""
from __future__ import annotations

import re

import numpy as np

from glassformer.display import InlineView, framed, resolve_lang
from glassformer.viewer.page import render_page, write_page

SCRIPTS = ["common.js", "interp.js"]
DIGITS = 5   # decimals kept in the page's JSON
HEAD_LABEL = re.compile(r"^L(\d+)H(\d+)$")
MLP_LABEL = re.compile(r"^L(\d+) MLP$")


def _rounded(values) -> list:
    """Nested lists of floats with DIGITS decimals (NaN, from 0 / 0, becomes None)."""
    array = np.round(np.asarray(values, np.float64), DIGITS)
    return [[None if np.isnan(v) else float(v) for v in row] for row in array] \
        if array.ndim == 2 else [None if np.isnan(v) else float(v) for v in array]


def patching_section(result, tokens: list[str], *, clean_text: str = "", corrupt_text: str = "",
                     target: str = "", other: str = "", estimate: bool = False) -> dict:
    """A Patching result as the page's tables: normalised (1: the clean answer restored, 0:
    nothing), raw values, and each table's peak (layer, column)."""
    tables = []
    for kind, table in result.tables.items():
        spread = result.clean - result.corrupt
        norm = table.normalised(result.clean, result.corrupt) if spread != 0 else \
            np.zeros_like(table.values)
        layer, column = np.unravel_index(np.argmax(norm), norm.shape)
        tables.append({"kind": kind, "columns": table.columns, "normalised": _rounded(norm),
                       "values": _rounded(table.values), "peak": [int(layer), int(column)]})
    return {"clean": round(result.clean, DIGITS), "corrupt": round(result.corrupt, DIGITS),
            "tokens": list(tokens), "clean_text": clean_text, "corrupt_text": corrupt_text,
            "target": target, "other": other, "estimate": bool(estimate), "tables": tables}


def attribution_grid(labels: list[str], values: np.ndarray) -> list[list[float]]:
    """(L, H + 1): each head's share, then the MLP's, per layer (the embeddings and biases stay
    in the term list only)."""
    cells = {}
    for label, value in zip(labels, values):
        head, mlp = HEAD_LABEL.match(label), MLP_LABEL.match(label)
        if head:
            cells[(int(head[1]), int(head[2]))] = float(value)
        elif mlp:
            cells[(int(mlp[1]), "mlp")] = float(value)
    layers = 1 + max((key[0] for key in cells), default=-1)
    heads = 1 + max((key[1] for key in cells if key[1] != "mlp"), default=-1)
    return _rounded([[cells.get((l, h), 0.0) for h in range(heads)] + [cells.get((l, "mlp"), 0.0)]
                     for l in range(layers)]) if layers else []


def attribution_section(result, *, prompt: str = "", target: str = "",
                        other: str | None = None) -> dict:
    """An Attribution as every term {label, value} (model order) and the layer x head grid."""
    return {"prompt": prompt, "target": target, "other": other,
            "logit": round(result.logit, DIGITS), "total": round(result.total, DIGITS),
            "terms": [{"label": label, "value": round(float(v), DIGITS)}
                      for label, v in zip(result.labels, result.values)],
            "grid": attribution_grid(result.labels, result.values)}


def heads_section(scores: dict, *, threshold: float, seq_len: int, batch: int,
                  seed: int) -> dict:
    """{kind: (L, H) scores} as grids, with the heads above threshold named, best first."""
    kinds = {}
    order = sorted(scores, key=lambda kind: (kind != "induction", kind))   # induction first
    for kind in order:
        grid = np.asarray(scores[kind])
        above = sorted(((int(l), int(h), float(grid[l, h]))
                        for l, h in np.argwhere(grid > threshold)), key=lambda x: -x[2])
        kinds[kind] = {"scores": _rounded(grid),
                       "above": [[l, h, round(s, DIGITS)] for l, h, s in above]}
    return {"threshold": threshold, "seq_len": seq_len, "batch": batch, "seed": seed,
            "kinds": kinds}


def interp_page_data(model_name: str, *, patching: dict | None = None,
                     attribution: dict | None = None, heads: dict | None = None,
                     sae: dict | None = None) -> dict:
    """The page's JSON: kind "interp", the model, and the sections given."""
    sections = {"patching": patching, "attribution": attribution, "heads": heads, "sae": sae}
    return {"kind": "interp", "model": model_name,
            **{name: value for name, value in sections.items() if value is not None}}


def write_interp_page(path, data: dict, *, lang: str):
    """Write the page to `path` (its folder must exist)."""
    return write_page(path, data, title=f"glassformer · {data['model']}", lang=lang,
                      scripts=SCRIPTS)


def interp_view(data: dict, *, lang: str | None = None) -> InlineView:
    """The page inline in a notebook (an <iframe srcdoc>, as every view of the viewer)."""
    lang = resolve_lang(lang)
    title = f"glassformer · {data['model']}"
    page = render_page(data, title=title, lang=lang, scripts=SCRIPTS)
    shown = [name for name in ("patching", "attribution", "heads", "sae") if name in data]
    return InlineView(framed(page, title), f"InterpView({data['model']}: {', '.join(shown)})")
