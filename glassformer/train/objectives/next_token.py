"""The decoder's objective ("next-token"): random windows of a token stream, and the
cross-entropy of every next token (with train_cfg.label_smoothing).

    data   one split of the text's token stream, as train/data.py reads it (1-D ids)
    draw   B random windows of T + 1 ids: x (B, T), y (B, T) = x shifted by one (get_batch)
    loss   objective.token_loss_and_grads on the family's (B, T, V) logits

This is nanoGPT's training, and what `glassformer train` and `glassformer finetune` on plain text
run. Its val loss is a code length per token, so a run also logs bits per byte.
"""
from __future__ import annotations

from functools import partial

import numpy as np

from glassformer.models.family import CAUSAL
from glassformer.train.data import get_batch
from glassformer.train.objectives.objective import (TEXT, Objective, check_kind,
                                                    token_eval_loss, token_loss_and_grads)


def draw_windows(data: np.ndarray, train_cfg, rng: np.random.Generator, *,
                 split: str = "data", step: int = 0, shuffle: bool = True
                 ) -> tuple[np.ndarray, np.ndarray]:
    """B random windows of T + 1 ids of the token stream (train/data.py get_batch), as nanoGPT
    draws them: from rng, for training and evals alike (step and shuffle are the record
    datasets' and unused here)."""
    return get_batch(data, train_cfg.batch_size, train_cfg.block_size, rng, split=split)


def the_stream(ids: np.ndarray, tokenizer) -> np.ndarray:
    """A split's ids are what draw_windows reads, as they are."""
    return ids


NEXT_TOKEN = Objective(name="next-token", kind=CAUSAL, reads=TEXT, draw=draw_windows,
                       loss_and_grads=token_loss_and_grads, eval_loss=token_eval_loss,
                       check=partial(check_kind, CAUSAL), prepare=the_stream,
                       bits_per_byte=True)
