"""The encoder-decoder's objective ("seq2seq"): length-bucketed batches of (source, target)
pairs, and the cross-entropy of the decoder's logits (teacher forcing).

    data   PairData, one split encoded and sorted by length (train/datasets/pairs.py)
    draw   the next B pairs of the run's length-grouped shuffled epochs (datasets/epochs.py:
           random megabatches of 50 B pairs, each sorted by length, so a batch's pairs are
           about as long), cut to their own longest source and target:
           src (B, S), tgt_in (B, T) = <s> y1 .. yn, y = tgt_out (B, T) = y1 .. </s>,
           IGNORE_INDEX on padding
    loss   objective.token_loss_and_grads, with train_cfg.label_smoothing on training batches;
           its eval loss is the plain cross-entropy per target token (no smoothing): the number
           to compare across models and recipes

`glassformer train --arch transformer` runs it (the G2P recipe, train/recipes/); its pairs are
read, tokenized and recorded by train/runs/pairs.py.
"""
from __future__ import annotations

from functools import partial

import numpy as np

from glassformer.errors import GlassformerError
from glassformer.models.family import ENCODER_DECODER
from glassformer.ops.cross_entropy import IGNORE_INDEX, cross_entropy_forward
from glassformer.tokenizers.pairs import PAD_ID
from glassformer.train.datasets.epochs import MEGABATCHES, batch_rows
from glassformer.train.datasets.pairs import PairData
from glassformer.train.objectives.objective import (PAIRS, Objective, check_kind,
                                                    token_loss_and_grads, with_frozen)


def pair_batch(data: PairData, rows: np.ndarray
               ) -> tuple[tuple[np.ndarray, np.ndarray], np.ndarray]:
    """((src (B, S), tgt_in (B, T)), tgt_out (B, T)) of the pairs `rows` (B,), cut to their own
    longest source and target (see the module docstring)."""
    s_max = int(data.src_len[rows].max())
    t_max = int(data.tgt_len[rows].max())
    src = data.src[rows, :s_max].astype(np.int64)               # (B, S)
    tgt = data.tgt[rows, :t_max].astype(np.int64)               # (B, T + 1)
    tgt_in = tgt[:, :-1]                                         # <s> y1 .. yn  (B, T)
    tgt_out = np.where(tgt[:, 1:] == PAD_ID, IGNORE_INDEX, tgt[:, 1:])  # y1 .. </s>  (B, T)
    return (src, tgt_in), tgt_out


def check_enough(data: PairData, batch_size: int, split: str) -> None:
    """A split holds at least one batch of pairs."""
    n = len(data.src_len)
    if n < batch_size:
        raise GlassformerError(f"batch size {batch_size} needs at least {batch_size} pairs in "
                               f"the {split} split, got {n}")


def draw_pair_batch(data: PairData, batch_size: int, rng: np.random.Generator, *,
                    split: str = "data") -> tuple[tuple[np.ndarray, np.ndarray], np.ndarray]:
    """B length-neighbour rows from a random start (bench/seq2seq.py times such batches)."""
    if not isinstance(rng, np.random.Generator):
        raise GlassformerError(f"expected rng to be a np.random.Generator, got "
                               f"{type(rng).__name__}")
    check_enough(data, batch_size, split)
    start = int(rng.integers(0, len(data.src_len) - batch_size + 1))
    return pair_batch(data, np.arange(start, start + batch_size))


def draw_pairs(data: PairData, train_cfg, rng: np.random.Generator | None = None, *,
               split: str = "data", step: int = 0, shuffle: bool = True):
    """The objective's draw: micro-batch `step`'s train_cfg.batch_size pairs, length-grouped
    (datasets/epochs.py; rng is not needed)."""
    check_enough(data, train_cfg.batch_size, split)
    rows = batch_rows(len(data.src_len), train_cfg, step=step, shuffle=shuffle,
                      group=MEGABATCHES * train_cfg.batch_size)          # (B,)
    return pair_batch(data, rows)


def plain_eval_loss(family, params: dict, cfg, x, y: np.ndarray, *, train_cfg=None,
                    frozen: dict | None = None) -> float:
    """Cross-entropy per counted target token in eval mode, without label smoothing."""
    logits, _ = family.forward(with_frozen(params, frozen), x, cfg, train=False)
    loss, _ = cross_entropy_forward(logits, y)
    return float(loss)


SEQ2SEQ = Objective(name="seq2seq", kind=ENCODER_DECODER, reads=PAIRS, draw=draw_pairs,
                    loss_and_grads=token_loss_and_grads, eval_loss=plain_eval_loss,
                    check=partial(check_kind, ENCODER_DECODER))
