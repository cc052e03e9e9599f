"""One training step's math: forward, fused cross-entropy, backward; and the eval loss.

Works for any decoder family (see models/registry.py): `family.forward(params, x, cfg, ...)`
returns (logits, ctx) and `family.backward(dlogits, ctx)` the grads.
"""
from __future__ import annotations

import numpy as np

from glassformer.ops.cross_entropy import cross_entropy_backward, cross_entropy_forward


def loss_and_grads(family, params: dict, cfg, x: np.ndarray, y: np.ndarray, *,
                   rng: np.random.Generator | None, dloss: float = 1.0
                   ) -> tuple[float, dict]:
    """Mean next-token loss on (x, y) and d(dloss * loss)/d params.

    dloss < 1 scales the gradient of one micro-batch under gradient accumulation.
    """
    logits, ctx = family.forward(params, x, cfg, train=True, rng=rng)   # (B, T, V)
    loss, ce_ctx = cross_entropy_forward(logits, y)
    dlogits = cross_entropy_backward(np.asarray(dloss, dtype=logits.dtype), ce_ctx)
    return float(loss), family.backward(dlogits, ctx)


def batch_loss(family, params: dict, cfg, x: np.ndarray, y: np.ndarray) -> float:
    """Mean next-token loss in eval mode (no dropout), forward only."""
    logits, _ = family.forward(params, x, cfg, train=False)
    loss, _ = cross_entropy_forward(logits, y)
    return float(loss)
