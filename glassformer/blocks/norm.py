"""Pick LayerNorm or RMSNorm by config, so blocks and models name one norm step, not two."""
from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from glassformer.blocks.config import BlockConfig
from glassformer.ops.layer_norm import layer_norm_backward, layer_norm_forward
from glassformer.ops.rms_norm import rms_norm_backward, rms_norm_forward


class NormCtx(NamedTuple):
    kind: str      # "layer" or "rms"
    inner: Any     # LayerNormCtx or RMSNormCtx


def norm_forward(params: dict, prefix: str, x: np.ndarray, cfg: BlockConfig
                 ) -> tuple[np.ndarray, NormCtx]:
    """Normalise x (..., C) with params[prefix + "w"] (and "b" for LayerNorm with a shift)."""
    if cfg.norm == "rms":
        y, inner = rms_norm_forward(x, params[prefix + "w"], eps=cfg.norm_eps)
    else:
        y, inner = layer_norm_forward(x, params[prefix + "w"], params.get(prefix + "b"),
                                      eps=cfg.norm_eps)
    return y, NormCtx(cfg.norm, inner)


def norm_backward(dy: np.ndarray, ctx: NormCtx, prefix: str) -> tuple[np.ndarray, dict]:
    """Returns (dx, {prefix + "w": dw[, prefix + "b": db]})."""
    if ctx.kind == "rms":
        dx, dw = rms_norm_backward(dy, ctx.inner)
        return dx, {prefix + "w": dw}
    dx, dw, db = layer_norm_backward(dy, ctx.inner)
    grads = {prefix + "w": dw}
    if db is not None:
        grads[prefix + "b"] = db
    return dx, grads


def init_norm(cfg: BlockConfig, prefix: str, dtype=np.float32) -> dict:
    """Scale 1 (and shift 0): a freshly initialised norm passes the normalised input through."""
    params = {prefix + "w": np.ones(cfg.d_model, dtype)}
    if cfg.norm == "layer" and cfg.norm_bias:
        params[prefix + "b"] = np.zeros(cfg.d_model, dtype)
    return params
