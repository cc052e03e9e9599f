"""Records that strict JSON parsers read: no NaN, no Infinity.

Python's json module writes a non-finite float as the bare tokens `NaN`, `Infinity` or
`-Infinity`, which RFC 8259 does not allow: jq, JavaScript's JSON.parse, Go and Rust reject the
whole line. A training log is read by such tools, so before a record is written each
non-finite number becomes `null` and its key is named in the record's "nonfinite" list:

    {"iter": 7, "reward": nan, "kl": 0.1}  ->  {"iter": 7, "reward": null, "kl": 0.1,
                                                "nonfinite": ["reward"]}

A nested key is named by its dotted path ("resumed_with.lr.1" for the second item of a list).
The note tells a value that was not finite from a value that was never measured (a key that is
absent). Writing with allow_nan=False after this step makes any value it missed an error, never
a bad line.
"""
from __future__ import annotations

import json
import math

import numpy as np

NOTE = "nonfinite"


def json_line(record: dict) -> str:
    """`record` as one line of strict JSON (finite_record, then no NaN or Infinity allowed)."""
    return json.dumps(finite_record(record), ensure_ascii=False, allow_nan=False) + "\n"


def finite_record(record: dict) -> dict:
    """A copy of `record` with every non-finite float (NumPy's too) as None, and NOTE listing
    their dotted keys; a record read back keeps its note for the values still None."""
    before = set(record.get(NOTE) or ())
    found: list[str] = []
    clean = {key: _finite(value, str(key), found, before)
             for key, value in record.items() if key != NOTE}
    if found:
        clean[NOTE] = found
    return clean


def _finite(value, path: str, found: list, before: set):
    """value with non-finite floats replaced by None, their paths appended to `found`."""
    if isinstance(value, dict):
        return {key: _finite(item, f"{path}.{key}", found, before) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(item, f"{path}.{i}", found, before) for i, item in enumerate(value)]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        found.append(path)
        return None
    if value is None and path in before:
        found.append(path)
    return value
