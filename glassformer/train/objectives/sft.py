"""Supervised fine-tuning on chat data ("sft"): padded batches of conversations, with loss on
the assistant's replies only.

    data   ChatData, conversations encoded with the model's chat template, right-padded
           (train/datasets/chat.py says how the replies are found)
    draw   the next B conversations of the run's shuffled epochs (datasets/epochs.py; an eval:
           the split in order), cut to the longest input among them (at most block_size)
    loss   objective.counted_loss_and_grads: y is IGNORE_INDEX on prompts and padding, and the
           LM head and its log-softmax run only on the replies' positions (issue 33: over a
           49,152-entry vocabulary they were a third of a LoRA step on SmolLM2)

`glassformer finetune` runs it on a .jsonl/.json file (the Tang SFT recipe, train/recipes/).
"""
from __future__ import annotations

from functools import partial

import numpy as np

from glassformer.errors import GlassformerError
from glassformer.models.family import CAUSAL
from glassformer.train.datasets.chat import ChatData
from glassformer.train.datasets.epochs import batch_rows
from glassformer.train.objectives.objective import (CHAT, Objective, check_kind,
                                                    counted_eval_loss, counted_loss_and_grads)


def draw_chat(data: ChatData, train_cfg, rng: np.random.Generator | None = None, *,
              split: str = "data", step: int = 0, shuffle: bool = True
              ) -> tuple[np.ndarray, np.ndarray]:
    """Micro-batch `step`'s B conversations (datasets/epochs.py; rng is not needed) as (x, y),
    each (B, T) int64 with T the longest input among them (at most block_size); y is
    IGNORE_INDEX on prompts and padding."""
    n = data.ids.shape[0]
    if n == 0:
        raise GlassformerError(f"the {split} split holds no conversations")
    rows = batch_rows(n, train_cfg, step=step, shuffle=shuffle)         # (B,)
    width = min(int(data.lengths[rows].max()) - 1, train_cfg.block_size)   # T
    x = data.ids[rows, :width].astype(np.int64)                         # (B, T)
    y = data.targets[rows, :width].astype(np.int64)                     # (B, T)
    return x, y


SFT = Objective(name="sft", kind=CAUSAL, reads=CHAT, draw=draw_chat,
                loss_and_grads=counted_loss_and_grads, eval_loss=counted_eval_loss,
                check=partial(check_kind, CAUSAL))
