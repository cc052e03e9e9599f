"""One training step and one eval loss, in this process: the reference the training loop calls.

Works for any decoder family (see models/registry.py): `family.forward(params, x, cfg, ...)`
returns (logits, ctx) and `family.backward(dlogits, ctx)` the grads.

The seam. The loop (train/loop.py) computes only through a `Steps` record:

    train_step(family, params, cfg, micro_batches, opt, *, rng, grad_clip, lr, beta1, beta2,
               weight_decay) -> (mean loss, AdamWState)       params and moments updated in place
    eval_loss(family, params, cfg, x, y) -> float
    start(model_cfg, train_cfg, run, train_data, val_data) -> the same five, once, first

`IN_PROCESS` holds this file's versions. train/distributed.py builds a `Steps` with the same
signatures that splits each batch over MPI ranks; the loop cannot tell the two apart, except that
only one process of a data-parallel run writes files (`writes_files`).
"""
from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np

from glassformer.errors import GlassformerError
from glassformer.ops.cross_entropy import cross_entropy_backward, cross_entropy_forward
from glassformer.train.optim import ADAMW_EPS, AdamWState, adamw_step, clip_grad_norm


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


def eval_loss(family, params: dict, cfg, x: np.ndarray, y: np.ndarray) -> float:
    """Mean next-token loss in eval mode (no dropout), forward only."""
    logits, _ = family.forward(params, x, cfg, train=False)
    loss, _ = cross_entropy_forward(logits, y)
    return float(loss)


def train_step(family, params: dict, cfg, micro_batches: list, opt: AdamWState, *,
               rng: np.random.Generator | None, grad_clip: float, lr: float,
               beta1: float = 0.9, beta2: float = 0.999, eps: float = ADAMW_EPS,
               weight_decay: float = 0.01) -> tuple[float, AdamWState]:
    """One optimizer step: the grads of each (x, y) in `micro_batches` summed (gradient
    accumulation, each weighted 1/n), clipped to global norm `grad_clip` (0: no clipping), then
    AdamW at `lr`, params and moments updated in place. Returns (mean micro-batch loss, state
    with t + 1). Dropout draws from `rng`.
    """
    if not micro_batches:
        raise GlassformerError("expected at least one micro-batch")
    n = len(micro_batches)
    total, summed = 0.0, None
    for x, y in micro_batches:
        loss, grads = loss_and_grads(family, params, cfg, x, y, rng=rng, dloss=1.0 / n)
        total += loss
        if summed is None:
            summed = grads
        else:
            for key, g in grads.items():
                summed[key] += g   # fan-in over micro-batches: this function owns `summed`
    if grad_clip > 0.0:
        summed, _ = clip_grad_norm(summed, grad_clip)
    params, opt = adamw_step(params, summed, opt, lr=lr, beta1=beta1, beta2=beta2, eps=eps,
                             weight_decay=weight_decay)
    return total / n, opt


def start_here(model_cfg, train_cfg, run, train_data, val_data) -> tuple:
    """In one process a run starts from what it was given."""
    return model_cfg, train_cfg, run, train_data, val_data


class Steps(NamedTuple):
    """What the training loop calls to compute (see the module docstring)."""
    train_step: Callable       # train_step's signature
    eval_loss: Callable        # eval_loss's signature
    start: Callable            # start_here's signature: where the run's state comes from
    writes_files: bool         # whether this process writes the log, checkpoints and progress


IN_PROCESS = Steps(train_step=train_step, eval_loss=eval_loss, start=start_here,
                   writes_files=True)
