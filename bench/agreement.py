"""How far two sides' next-token logits agree, with the tolerance llama.cpp's own rounding sets.

Top-1 agreement alone asks for the same argmax everywhere; where the reference's top two logits
are nearly tied, any change of rounding may swap them. llama.cpp rounds every activation row to
8 bits before a quantized product (Q8_1/Q8_0 blocks), so a difference of one float32 ulp
anywhere upstream may move a value across a rounding boundary, shift that code by one step, and
the change then spreads through every later product: two computations equal to float32
rounding op by op (bench/llamacpp_layers.py) still end with independent 8-bit rounding noise.
llama.cpp disagrees with itself by as much when only its own arithmetic changes (a float32
instead of a float16 KV cache, flash attention on): bench/llamacpp.py measures those sides too.

So besides the exact top-1 agreement this reports, per side, over the same positions:

- `within_tolerance` (tau, a --tolerance): the share of positions where the side's top-1
  token is within tau logits of the reference's best *in the reference's own logits* (the side
  picked a token the reference ranks as nearly as good); tau = 0 is the exact agreement;
- `decided` (gap, a --decided): top-1 agreement over the positions where the reference's top
  two are more than `gap` apart, and the share of positions that is.

Each window adds its arrays with `tally_window`; `summary` gives the figures.
"""
from __future__ import annotations

import numpy as np

SETTLED = 8   # a window's first positions carry the largest activations (the attention sink)


def new_tally() -> dict:
    return dict(agree=0, ties=0, max_diff=0.0, max_later=0.0, sum_abs=0.0, deficits=[], gaps=[])


def tally_window(t: dict, ref: np.ndarray, got: np.ndarray, tie: float) -> None:
    """Add one window: ref, got (W, V) logits (the reference's, the side's)."""
    top_ref, top_got = ref.argmax(-1), got.argmax(-1)                     # (W,)
    two = np.sort(ref, axis=-1)[:, -2:]                                   # (W, 2)
    gap = two[:, 1] - two[:, 0]                                           # (W,)
    rows = np.arange(len(ref))
    deficit = ref[rows, top_ref] - ref[rows, top_got]                     # (W,) >= 0
    diff = np.abs(ref - got)
    t["agree"] += int((top_ref == top_got).sum())
    t["ties"] += int(((top_ref != top_got) & (gap < tie)).sum())
    t["max_diff"] = max(t["max_diff"], float(diff.max()))
    t["max_later"] = max(t["max_later"], float(diff[SETTLED:].max()))
    t["sum_abs"] += float(diff.mean(axis=-1).sum())
    t["deficits"].append(deficit.astype(np.float64))
    t["gaps"].append(gap.astype(np.float64))


def summary(t: dict, positions: int, tolerances, decided) -> dict:
    """The figures of one side's tally (module docstring)."""
    deficit, gap = np.concatenate(t["deficits"]), np.concatenate(t["gaps"])
    same = deficit == 0
    out = {"top1_agreement": round(t["agree"] / positions, 4),
           "disagreements": positions - t["agree"],
           "disagreements_at_near_ties": t["ties"],
           "max_abs_logit_diff": round(t["max_diff"], 3),
           f"max_abs_logit_diff_from_position_{SETTLED}": round(t["max_later"], 3),
           "mean_abs_logit_diff": round(t["sum_abs"] / positions, 4),
           "largest_deficit": round(float(deficit.max()), 3),
           "within_tolerance": {f"{tau:g}": round(float((deficit <= tau).mean()), 4)
                                for tau in tolerances},
           "decided": {}}
    for g in decided:
        keep = gap > g
        out["decided"][f"{g:g}"] = {
            "share_of_positions": round(float(keep.mean()), 4),
            "top1_agreement": round(float(same[keep].mean()), 4) if keep.any() else None}
    return out


def floats(text: str) -> list[float]:
    """'0.25,0.5' -> [0.25, 0.5]."""
    return [float(x) for x in text.split(",") if x.strip()]
