"""Activation patching: which activation, at which layer and position, carries the difference
between a clean prompt and a corrupted one.

Run the corrupted prompt, but replace one activation with its value from the clean run; the
metric (e.g. the logit difference of the right and the wrong answer) moves back towards its
clean value exactly as much as that activation carries what the corruption removed. Done for
every layer and position (resid_pre, attn_out, mlp_out) or every layer and head (z, over all
positions), as TransformerLens's patching.get_act_patch_* do.

Each layer is one forward of a batch: row p replaces position p (or head p), so a table of L
layers costs L forwards of T rows, not L T forwards of one.

    normalised = (patched - corrupted) / (clean - corrupted)     1: all restored, 0: nothing
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from glassformer.errors import GlassformerError
from glassformer.interpret.cache import _ids, run_with_cache, run_with_hooks

KINDS = ("resid_pre", "attn_out", "mlp_out", "resid_mid", "resid_post", "z")


class PatchTable(NamedTuple):
    """One patching table: values[layer, column] the metric after patching that cell; columns
    are positions, or heads for kind "z"."""
    kind: str
    values: np.ndarray        # (L, T) or (L, H)
    columns: str              # "position" or "head"

    def normalised(self, clean: float, corrupt: float) -> np.ndarray:
        return (self.values - corrupt) / (clean - corrupt)

    def peak(self) -> tuple[int, int]:
        """(layer, column) of the largest value."""
        return tuple(int(i) for i in np.unravel_index(np.argmax(self.values), self.values.shape))


class Patching(NamedTuple):
    tables: dict              # {kind: PatchTable}
    clean: float              # the metric on the clean run
    corrupt: float            # and on the corrupted one


def check_same_length(clean_ids: np.ndarray, corrupt_ids: np.ndarray) -> None:
    if clean_ids.shape != corrupt_ids.shape:
        raise GlassformerError(f"patching needs prompts of the same token length: the clean one "
                               f"has {clean_ids.shape[-1]} tokens, the corrupted one "
                               f"{corrupt_ids.shape[-1]}")


def hook_name(kind: str, layer: int) -> str:
    if kind not in KINDS:
        raise GlassformerError(f"unknown patching kind {kind!r}; choose from {', '.join(KINDS)}")
    return f"blocks.{layer}.attn.hook_z" if kind == "z" else f"blocks.{layer}.hook_{kind}"


def _patch_layer(model, corrupt_ids, name: str, clean_value: np.ndarray, metric, kind: str
                 ) -> np.ndarray:
    """The metric with `name` patched from the clean run, one row per position (or head)."""
    columns = clean_value.shape[2] if kind == "z" else clean_value.shape[1]
    batch = np.repeat(corrupt_ids, columns, axis=0)                         # (N, T)

    def put_clean(value, hook_name):
        out = value.copy()
        for row in range(columns):
            if kind == "z":
                out[row, :, row] = clean_value[0, :, row]                   # head `row`, all pos
            else:
                out[row, row] = clean_value[0, row]                         # position `row`
        return out
    logits = run_with_hooks(model, batch, [(name, put_clean)])
    return np.array([float(metric(logits[row:row + 1])) for row in range(columns)])


def patch(model, clean_ids, corrupt_ids, metric, hook_names=("resid_pre",), *,
          max_cache_mb: float | None = None) -> Patching:
    """Activation patching of each kind in hook_names ("resid_pre", "attn_out", "mlp_out",
    "resid_mid", "resid_post": layers x positions; "z": layers x heads over all positions).
    metric(logits (1, T, V)) -> float. Prompts: (T,) or (1, T) ids of the same length."""
    clean_ids, corrupt_ids = _ids(model, clean_ids), _ids(model, corrupt_ids)
    check_same_length(clean_ids, corrupt_ids)
    if clean_ids.shape[0] != 1:
        raise GlassformerError(f"patching runs one prompt pair at a time, got {clean_ids.shape[0]}")
    kinds = [hook_names] if isinstance(hook_names, str) else list(hook_names)
    kinds = [k[len("hook_"):] if k.startswith("hook_") else k for k in kinds]
    names = [hook_name(kind, layer) for kind in kinds for layer in range(model.cfg.n_layer)]
    clean_logits, cache = run_with_cache(model, clean_ids, names, max_cache_mb=max_cache_mb)
    corrupt_logits = model(corrupt_ids)
    tables = {}
    for kind in kinds:
        rows = [_patch_layer(model, corrupt_ids, hook_name(kind, layer),
                             cache[hook_name(kind, layer)], metric, kind)
                for layer in range(model.cfg.n_layer)]
        tables[kind] = PatchTable(kind, np.array(rows), "head" if kind == "z" else "position")
    return Patching(tables, float(metric(clean_logits)), float(metric(corrupt_logits)))


def logit_diff_metric(target: int, other: int | None, position: int = -1):
    """metric(logits) = logits[0, position, target] - logits[0, position, other] (or the
    target's logit alone when other is None)."""
    def metric(logits):
        row = logits[0, position].astype(np.float64)
        return row[int(target)] - (0.0 if other is None else row[int(other)])
    return metric
