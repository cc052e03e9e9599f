"""Hook points a forward may hand to a caller's function, which may return a replacement.

Interpretability (glassformer/interpret/) reads a forward's values off its ctx, with no help from
the forward. To *change* a value mid-forward (zero-ablate a head, patch in another run's
activation, add a steering vector) the forward has to ask: at each of a few named points it
calls `run_hook(hooks, name, value)`, which returns the value itself when nobody asked for that
point, else what the functions returned.

`hooks` is a plain dict {full hook name: [fn, ...]} passed down the forward explicitly (models ->
models/common.py -> blocks/residual.py -> blocks/attention.py), or None. None is the default
and the fast path: one `is None` test per point, no copy, nothing called.

    fn(value, name) -> None (keep the value) or an array of the value's shape and dtype

The names are TransformerLens's (blocks.{l}.hook_resid_pre, blocks.{l}.attn.hook_z, ...) and the
value's layout is theirs too: heads as (B, T, H, D). `run_hook` takes a `to_hook` view and its
inverse `from_hook` for points whose own layout differs (the heads are (B, H, T, D) inside).
A replacement of the wrong shape or dtype is refused in one line naming the hook.
"""
from __future__ import annotations

import numpy as np

from glassformer.errors import GlassformerError


def heads_view(x: np.ndarray) -> np.ndarray:
    """(B, H, T, D) -> (B, T, H, D), TransformerLens's layout of q, k, v and z (a view)."""
    return x.transpose(0, 2, 1, 3)


def run_hook(hooks: dict | None, name: str, value: np.ndarray, *, to_hook=None,
             from_hook=None) -> np.ndarray:
    """The value at hook point `name`, after the functions hooked there (none: value itself).

    to_hook, from_hook: views between the forward's layout and the hook's (heads_view is its
    own inverse)."""
    if hooks is None or name not in hooks:
        return value
    shown = value if to_hook is None else to_hook(value)
    replaced = False
    for fn in hooks[name]:
        out = fn(shown, name)
        if out is not None:
            shown, replaced = checked_replacement(name, shown, out), True
    if not replaced:
        return value
    return shown if from_hook is None else np.ascontiguousarray(from_hook(shown))


def checked_replacement(name: str, value: np.ndarray, out) -> np.ndarray:
    """`out` as the replacement of `value` at hook `name`: the same shape and dtype, or one line."""
    if not isinstance(out, np.ndarray):
        raise GlassformerError(f"hook {name} returned {type(out).__name__}; a hook returns None "
                               f"or a NumPy array of shape {value.shape} and dtype {value.dtype}")
    if out.shape != value.shape or out.dtype != value.dtype:
        raise GlassformerError(f"hook {name} returned shape {out.shape} dtype {out.dtype}; "
                               f"expected shape {value.shape} dtype {value.dtype}")
    return out
