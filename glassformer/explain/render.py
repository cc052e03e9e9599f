"""Plain-text rendering of arrays: fixed-precision matrices, ASCII heatmaps, JSON-safe lists."""
from __future__ import annotations

import math

import numpy as np

# Printed precision: 4 decimals is what the seed tutorial prints, so the numbers line up.
PRECISION = 4
# Light to dark; a weight of 0 is blank, 1 is the darkest.
SHADES = " .:-=+*#%@"
# JSON has no -inf: a masked score is written as the seed's fill value.
JSON_NEG_INF = -1e9


def format_array(a, precision: int = PRECISION, indent: str = "    ") -> str:
    """Matrix text with `precision` decimals, each line indented."""
    if np.ndim(a) == 0:
        return indent + f"{float(a):.{precision}f}"
    arr = np.asarray(a)
    if arr.dtype == np.bool_:
        arr = arr.astype(int)
    text = np.array2string(arr, precision=precision, suppress_small=True, max_line_width=120)
    return "\n".join(indent + line for line in text.splitlines())


def heatmap(weights: np.ndarray, indent: str = "    ") -> str:
    """One character per entry of a (T, S) matrix of values in [0, 1]."""
    top = len(SHADES) - 1
    rows = []
    for row in np.asarray(weights):
        cells = "".join(SHADES[int(round(float(w) * top))] * 2 for w in np.clip(row, 0.0, 1.0))
        rows.append(f"{indent}|{cells}|")
    return "\n".join(rows)


def to_jsonable(value):
    """Arrays -> nested lists of Python numbers; -inf -> JSON_NEG_INF; bools stay bools."""
    if np.ndim(value) == 0:
        number = float(value)
        return JSON_NEG_INF if math.isinf(number) and number < 0 else number
    arr = np.asarray(value)
    if arr.dtype == np.bool_:
        return arr.tolist()
    arr = np.where(np.isneginf(arr), JSON_NEG_INF, arr.astype(np.float64))
    return arr.tolist()
