"""The tables `glassformer patch`, `attribute` and `heads` print: plain text a terminal shows,
and the same numbers as a JSON-ready dict (--json)."""
from __future__ import annotations

import numpy as np


def grid_text(values: np.ndarray, row_label: str, columns: list[str], *, digits: int = 2,
              width: int = 7) -> str:
    """A (rows, columns) grid with a header, one row per layer: 'L 0  0.01  0.93 ...'."""
    head = f"{row_label:>5} " + "".join(f"{c[:width - 1]:>{width}}" for c in columns)
    lines = [head]
    for i, row in enumerate(values):
        lines.append(f"{i:>5} " + "".join(f"{v:>{width}.{digits}f}" for v in row))
    return "\n".join(lines)


def patching_json(result, tokens: list[str]) -> dict:
    """{"clean", "corrupt", "tables": {kind: {"columns", "normalised", "peak_layer", ...}}}."""
    tables = {}
    for kind, table in result.tables.items():
        norm = table.normalised(result.clean, result.corrupt)
        layer, column = np.unravel_index(np.argmax(norm), norm.shape)
        tables[kind] = {"columns": table.columns, "values": table.values.tolist(),
                        "normalised": norm.tolist(), "peak_layer": int(layer),
                        "peak_column": int(column)}
    return {"clean": result.clean, "corrupt": result.corrupt, "tokens": tokens, "tables": tables}


def patching_text(result, tokens: list[str]) -> str:
    """Each table normalised (1: the clean answer restored), with its peak named."""
    out = [f"metric: clean {result.clean:.3f}, corrupted {result.corrupt:.3f}; cells show "
           f"(patched - corrupted) / (clean - corrupted)"]
    for kind, table in result.tables.items():
        norm = table.normalised(result.clean, result.corrupt)
        columns = tokens if table.columns == "position" else [
            f"H{h}" for h in range(norm.shape[1])]
        layer, column = np.unravel_index(np.argmax(norm), norm.shape)
        out += ["", f"{kind}: layers x {table.columns}s, peak {norm[layer, column]:.2f} at "
                f"layer {layer}, {table.columns} {column} {columns[column]!r}",
                grid_text(norm, "layer", [c.replace(" ", "_") for c in columns])]
    return "\n".join(out)


def attribution_text(result, top: int) -> str:
    lines = [f"logit (difference) {result.logit:.4f}; the {len(result.labels)} terms sum to "
             f"{result.total:.4f}", f"top {top} by size:"]
    lines += [f"  {label:<16} {value:+.4f}" for label, value in result.top(top)]
    return "\n".join(lines)


def attribution_json(result) -> dict:
    return {"logit": result.logit, "total": result.total,
            "terms": dict(zip(result.labels, [float(v) for v in result.values]))}


def heads_text(kind: str, scores: np.ndarray, strong: list, threshold: float) -> str:
    named = ", ".join(f"L{l}H{h} ({s:.2f})" for l, h, s in strong) or "none"
    return "\n".join([f"{kind} scores, layers x heads:",
                      grid_text(scores, "layer", [f"H{h}" for h in range(scores.shape[1])]),
                      f"above {threshold}: {named}"])
