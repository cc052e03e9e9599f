"""One training step and one eval loss, in this process: the reference the training loop calls.

Works for any family (models/registry.py) and any objective (train/objectives/objective.py): the objective
turns a batch into a loss and the grads of the trained params.

The seam. The loop (train/loop.py) computes only through a `Steps` record:

    train_step(family, params, cfg, micro_batches, opt, *, rng, grad_clip, lr, beta1, beta2,
               weight_decay, objective, train_cfg, frozen, held)
                                  -> (mean loss, AdamWState, the objective's mean metrics)
                                                  params and moments updated in place, but
                                                  the `held` keys of params (hold_still)
    eval_loss(family, params, cfg, x, y, *, objective, train_cfg, frozen) -> float
    start(model_cfg, train_cfg, run, train_data, val_data, frozen) -> the same six, once, first
    full_state(params, opt) -> None       before each checkpoint, on every process

`IN_PROCESS` holds this file's versions. train/distributed.py builds a `Steps` with the same
signatures that splits each batch over MPI ranks; the loop cannot tell the two apart, except that
only one process of a data-parallel run writes files (`writes_files`).
"""
from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np

from glassformer.errors import GlassformerError
from glassformer.train.objectives.next_token import NEXT_TOKEN
from glassformer.train.objectives.objective import Objective
from glassformer.train.optim import (ADAMW_EPS, AdamWState, adamw_step, clip_grad_norm,
                                     decay_keys)


def loss_and_grads(family, params: dict, cfg, x, y: np.ndarray, *,
                   rng: np.random.Generator | None, dloss: float = 1.0,
                   objective: Objective = NEXT_TOKEN, train_cfg=None,
                   frozen: dict | None = None) -> tuple[float, dict]:
    """The objective's mean loss on (x, y) and d(dloss * loss)/d params
    (train/objectives/objective.py), its metrics left out: one batch's gradient, for a caller
    that is not the loop (tests, benchmarks).

    dloss < 1 scales the gradient of one micro-batch under gradient accumulation.
    """
    loss, grads, _ = objective.loss_and_grads(family, params, cfg, x, y, rng=rng, dloss=dloss,
                                              train_cfg=train_cfg, frozen=frozen or {})
    return loss, grads


def eval_loss(family, params: dict, cfg, x, y: np.ndarray, *, objective: Objective = NEXT_TOKEN,
              train_cfg=None, frozen: dict | None = None) -> float:
    """The objective's mean loss in eval mode (no dropout), forward only."""
    return objective.eval_loss(family, params, cfg, x, y, train_cfg=train_cfg,
                               frozen=frozen or {})


def train_step(family, params: dict, cfg, micro_batches: list, opt: AdamWState, *,
               rng: np.random.Generator | None, grad_clip: float, lr: float,
               beta1: float = 0.9, beta2: float = 0.999, eps: float = ADAMW_EPS,
               weight_decay: float = 0.01, objective: Objective = NEXT_TOKEN, train_cfg=None,
               frozen: dict | None = None, held: frozenset = frozenset()
               ) -> tuple[float, AdamWState, dict]:
    """One optimizer step: the grads of each (x, y) in `micro_batches` summed (gradient
    accumulation, each weighted 1/n), clipped to global norm `grad_clip` (0: no clipping), then
    AdamW at `lr`, params and moments updated in place. Returns (mean micro-batch loss, state
    with t + 1, the objective's metrics averaged over the micro-batches). Dropout draws from `rng`. Only `params` train; `frozen` is read, never updated;
    the `held` keys of params stay as they are this step (hold_still).
    """
    if not micro_batches:
        raise GlassformerError("expected at least one micro-batch")
    n = len(micro_batches)
    total, summed = 0.0, None
    measured: dict[str, float] = {}   # the objective's metrics, mean of n
    for x, y in micro_batches:
        loss, grads, metrics = objective.loss_and_grads(family, params, cfg, x, y, rng=rng,
                                                        dloss=1.0 / n, train_cfg=train_cfg,
                                                        frozen=frozen or {})
        for name, value in metrics.items():
            measured[name] = measured.get(name, 0.0) + value / n
        total += loss
        if summed is None:
            summed = grads
        else:
            for key, g in grads.items():
                summed[key] += g   # fan-in over micro-batches: this function owns `summed`
    if objective.rule is not None:
        objective.rule(params, summed, train_cfg)  # moves its params, zeroes their grads
    decay = hold_still(summed, held)
    if grad_clip > 0.0:
        summed, _ = clip_grad_norm(summed, grad_clip)
    params, opt = adamw_step(params, summed, opt, lr=lr, beta1=beta1, beta2=beta2, eps=eps,
                             weight_decay=weight_decay, decay=decay)
    return total / n, opt, measured   # the loop logs the metrics beside train_loss


def hold_still(grads: dict, held: frozenset) -> frozenset:
    """Zero the grads of the `held` keys in place (so they count for nothing in the clip norm
    and AdamW, whose moments start at zero, moves them by exactly 0); returns the keys AdamW
    decays: decay_keys without the held ones. TrainConfig.hold_iters uses it."""
    for key in held & grads.keys():
        grads[key][...] = 0.0
    return decay_keys(grads) - held


def start_here(model_cfg, train_cfg, run, train_data, val_data, frozen) -> tuple:
    """In one process a run starts from what it was given."""
    return model_cfg, train_cfg, run, train_data, val_data, frozen


def state_is_here(params: dict, opt: AdamWState) -> None:
    """In one process the params and moments are all here after every step: nothing to do."""


class Steps(NamedTuple):
    """What the training loop calls to compute (see the module docstring)."""
    train_step: Callable       # train_step's signature
    eval_loss: Callable        # eval_loss's signature
    start: Callable            # start_here's signature: where the run's state comes from
    writes_files: bool         # whether this process writes the log, checkpoints and progress
    # state_is_here's signature: called on every process before a checkpoint is written, so
    # that the one that writes holds all of the moments (a data-parallel rank updates only its
    # group's between checkpoints: train/distributed.py's gather_moments)
    full_state: Callable = state_is_here


IN_PROCESS = Steps(train_step=train_step, eval_loss=eval_loss, start=start_here,
                   writes_files=True, full_state=state_is_here)
