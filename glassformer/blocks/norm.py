"""Pick LayerNorm or RMSNorm by config, so blocks and models name one norm step, not two.

A norm's params reach it as its own sub-dict with local names: "w" (C,), the scale, and "b" (C,),
the shift, which only a LayerNorm with `norm_bias` has. Its backward returns them as
({"w": dw[, "b": db]}, dx): param grads first, then the input's, as every block does.
"""
from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from glassformer.blocks.config import BlockConfig
from glassformer.kernels.choice import train_kernels
from glassformer.ops.layer_norm import layer_norm_backward, layer_norm_forward
from glassformer.ops.rms_norm import rms_norm_backward, rms_norm_forward


class NormCtx(NamedTuple):
    kind: str      # "layer" or "rms"
    inner: Any     # LayerNormCtx or RMSNormCtx


def norm_shapes(cfg: BlockConfig) -> dict[str, tuple[int, ...]]:
    """Param names and shapes of one norm: "w" (C,), and "b" (C,) for a LayerNorm with a shift."""
    shapes = {"w": (cfg.d_model,)}
    if cfg.norm == "layer" and cfg.norm_bias:
        shapes["b"] = (cfg.d_model,)
    return shapes


def norm_gain(w: np.ndarray, cfg: BlockConfig) -> np.ndarray:
    """The scale an RMSNorm multiplies by: w, or (offset + w) for Gemma's norms, whose stored w
    starts at 0 (cfg.norm_offset = 1). d gain / d w = 1, so w's gradient is the gain's."""
    return w if not cfg.norm_offset else w + np.asarray(cfg.norm_offset, w.dtype)


def norm_forward(params: dict, x: np.ndarray, cfg: BlockConfig) -> tuple[np.ndarray, NormCtx]:
    """Normalise x (..., C) -> (..., C) with params["w"] (and params["b"], when present).
    The compiled norms (kernels/train_numba.py) run when kernels/choice.py says so, else the
    ops (the reference); both make the same ctx."""
    compiled = train_kernels()
    if cfg.norm == "rms":
        forward = rms_norm_forward if compiled is None else compiled.rms_norm_forward
        y, inner = forward(x, norm_gain(params["w"], cfg), eps=cfg.norm_eps)
    else:
        forward = layer_norm_forward if compiled is None else compiled.layer_norm_forward
        y, inner = forward(x, params["w"], params.get("b"), eps=cfg.norm_eps)
    return y, NormCtx(cfg.norm, inner)


def norm_backward(dy: np.ndarray, ctx: NormCtx) -> tuple[dict, np.ndarray]:
    """Returns ({"w": dw[, "b": db]}, dx), dx (..., C) like dy."""
    compiled = train_kernels()
    if ctx.kind == "rms":
        dx, dw = (rms_norm_backward if compiled is None else compiled.rms_norm_backward)(
            dy, ctx.inner)
        return {"w": dw}, dx
    dx, dw, db = (layer_norm_backward if compiled is None else compiled.layer_norm_backward)(
        dy, ctx.inner)
    grads = {"w": dw}
    if db is not None:
        grads["b"] = db
    return grads, dx


def init_norm(cfg: BlockConfig, dtype=np.float32) -> dict:
    """Scale 1 (and shift 0): a freshly initialised norm passes the normalised input through
    (Gemma's stored w is then 0: its gain is 1 + w)."""
    shapes = norm_shapes(cfg)
    params = {"w": np.full(shapes["w"], 1.0 - cfg.norm_offset, dtype)}        # (C,)
    if "b" in shapes:
        params["b"] = np.zeros(shapes["b"], dtype)                            # (C,)
    return params
