"""What a run learns: how its data becomes batches, and a batch becomes a loss and gradients.

The training loop (train/loop.py) is the same for every kind of training; an `Objective` is the
part that differs:

    draw(data, train_cfg, rng, *, split) -> (x, y)
        x: int ids (B, T), or a tuple of arrays with the rows on axis 0 (an encoder-decoder's
           (source, target input)); y: (B, T') int64 targets, IGNORE_INDEX where no loss counts.
        `data` is whatever this objective's draw reads: a 1-D token array for next-token
        prediction and masked-LM, its own record of arrays for pairs or chat examples.
    loss_and_grads(family, params, cfg, x, y, *, rng, dloss, train_cfg, frozen) -> (loss, grads)
        the mean loss on (x, y) and d(dloss * loss)/d params, for the keys of `params` only.
    eval_loss(family, params, cfg, x, y, *, train_cfg, frozen) -> float
        the same loss in eval mode (no dropout), forward only.

`frozen` holds weights the forward reads but the optimizer never updates (a LoRA run's base
model); it is {} when everything trains. Data parallelism (train/distributed.py) splits x's and
y's rows over the ranks, and weighs each rank's loss by its share of the counted targets.

NEXT_TOKEN, here, is the decoder's objective: random windows of the token stream, and the
cross-entropy of every next token (with train_cfg.label_smoothing).
"""
from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np

from glassformer.ops.cross_entropy import cross_entropy_backward, cross_entropy_forward
from glassformer.train.data import get_batch


class Objective(NamedTuple):
    """The three functions of one kind of training (see the module docstring)."""
    name: str                 # as TrainConfig.objective and --objective spell it
    draw: Callable            # draw(data, train_cfg, rng, *, split) -> (x, y)
    loss_and_grads: Callable  # (family, params, cfg, x, y, *, rng, dloss, train_cfg, frozen)
    eval_loss: Callable       # (family, params, cfg, x, y, *, train_cfg, frozen) -> float


def rows_of(x, rows: slice):
    """x[rows] for an array, or for each array of a tuple (its type kept)."""
    if isinstance(x, tuple):
        parts = [part[rows] for part in x]
        return type(x)(*parts) if hasattr(x, "_fields") else tuple(parts)   # a NamedTuple too
    return x[rows]


def with_frozen(params: dict, frozen: dict | None) -> dict:
    """Every weight the forward reads: the frozen ones, then the trained ones (which win)."""
    return {**frozen, **params} if frozen else params


def only_trained(grads: dict, params: dict) -> dict:
    """The grads of the trained keys (a family may also return some for frozen weights)."""
    if grads.keys() == params.keys():
        return grads
    return {key: grads[key] for key in params}


def token_loss_and_grads(family, params: dict, cfg, x, y: np.ndarray, *,
                         rng: np.random.Generator | None, dloss: float = 1.0, train_cfg=None,
                         frozen: dict | None = None) -> tuple[float, dict]:
    """Mean cross-entropy of family.forward's logits against y, and d(dloss * loss)/d params.

    Any objective whose model maps x to (B, T', V) logits for the targets y uses this: next-token,
    masked-LM (y ignores the unmasked positions), chat fine-tuning (y ignores the prompts),
    encoder-decoder (x = (source, target input)). dloss < 1 scales one micro-batch's gradient
    under gradient accumulation.
    """
    smoothing = float(getattr(train_cfg, "label_smoothing", 0.0))
    logits, ctx = family.forward(with_frozen(params, frozen), x, cfg, train=True,
                                 rng=rng)                                # (B, T', V)
    loss, ce_ctx = cross_entropy_forward(logits, y, label_smoothing=smoothing)
    dlogits = cross_entropy_backward(np.asarray(dloss, dtype=logits.dtype), ce_ctx)
    return float(loss), only_trained(family.backward(dlogits, ctx), params)


def token_eval_loss(family, params: dict, cfg, x, y: np.ndarray, *, train_cfg=None,
                    frozen: dict | None = None) -> float:
    """token_loss_and_grads' loss in eval mode (no dropout), forward only."""
    smoothing = float(getattr(train_cfg, "label_smoothing", 0.0))
    logits, _ = family.forward(with_frozen(params, frozen), x, cfg, train=False)
    loss, _ = cross_entropy_forward(logits, y, label_smoothing=smoothing)
    return float(loss)


def draw_windows(data: np.ndarray, train_cfg, rng: np.random.Generator, *,
                 split: str = "data") -> tuple[np.ndarray, np.ndarray]:
    """B random windows of T + 1 ids of the token stream (train/data.py get_batch)."""
    return get_batch(data, train_cfg.batch_size, train_cfg.block_size, rng, split=split)


NEXT_TOKEN = Objective(name="next-token", draw=draw_windows,
                       loss_and_grads=token_loss_and_grads, eval_loss=token_eval_loss)
