"""What a fine-tuning run needs for the alignment objectives (DPO, GRPO) beyond SFT's.

    check_align_shards --workers N: whole pairs (DPO) or groups (GRPO) per rank
    reference_weights  the frozen entries that hold the reference (train/objectives/dpo.py):
                       none for the default (adapters off), the starting adapter for
                       `--ref adapter`, a copy of every starting weight for a --full run

train/runs/finetune.py and the prefs and prompts forms (train/runs/forms.py, which read the data)
call these; the objectives themselves know nothing of run folders.
"""
from __future__ import annotations

import numpy as np

from glassformer.errors import GlassformerError
from glassformer.ops.grpo_loss import LOSS_TYPES, SCALES
from glassformer.train.objectives.dpo import DPO, REF_PREFIX
from glassformer.train.objectives.grpo import GRPO
from glassformer.train.rewards import call_reward

ALIGN_OBJECTIVES = (DPO.name, GRPO.name)
REFS = ("base", "adapter")   # --ref: the model with the adapters off, or the starting adapter


# what a rank of a data-parallel run takes whole (train/objectives/ranks.py)
UNITS = {DPO.name: ("pairs", "a pair's chosen and rejected rows stay on one rank"),
         GRPO.name: ("prompts", "a prompt's group of completions stays on one rank")}


def check_align_shards(objective: str, batch_size: int, workers: int) -> None:
    """--batch-size (pairs, prompts) must split evenly over --workers ranks, in one line."""
    if objective in UNITS and workers > 1 and batch_size % workers:
        unit, why = UNITS[objective]
        raise GlassformerError(f"--batch-size {batch_size} ({unit}) does not split evenly over "
                               f"{workers} ranks ({why}); use a multiple of {workers}")


def check_grpo_config(train_cfg) -> None:
    """GRPO's settings, one line each."""
    if train_cfg.num_generations < 2:
        raise GlassformerError(f"GRPO compares completions within a group: --num-generations "
                               f"must be at least 2, got {train_cfg.num_generations}")
    if train_cfg.max_completion_tokens < 1:
        raise GlassformerError("--max-completion-tokens must be at least 1")
    if train_cfg.grad_accum > 1:
        # TRL samples one generation batch for all its accumulated micro-batches: the batch's
        # reward std and DAPO's token count span them all. Here that batch is --batch-size,
        # whose update already runs in memory-bounded chunks of rows (objectives/grpo.py).
        raise GlassformerError(f"GRPO samples and updates the whole batch at once, in chunks "
                               f"that bound memory: give --batch-size "
                               f"{train_cfg.batch_size * train_cfg.grad_accum} instead of "
                               f"--grad-accum {train_cfg.grad_accum} (TRL's accumulation over "
                               f"one generation batch)")
    if train_cfg.loss_type not in LOSS_TYPES:
        raise GlassformerError(f"--loss-type must be one of {', '.join(LOSS_TYPES)}, got "
                               f"{train_cfg.loss_type!r}")
    if train_cfg.scale_rewards not in SCALES:
        raise GlassformerError(f"--scale-rewards must be one of {', '.join(SCALES)}, got "
                               f"{train_cfg.scale_rewards!r}")
    if not train_cfg.temperature > 0.0:
        raise GlassformerError("GRPO samples: --temperature must be above 0")


def probe_rewards(rewards: list, record: dict, group: int, conversational: bool) -> None:
    """Each reward function on one group of empty completions of the first prompt: a function
    that raises or answers with the wrong length is refused before anything is written."""
    empty = [{"role": "assistant", "content": ""}] if conversational else ""
    columns = {key: [value] * group for key, value in record.items() if key != "prompt"}
    columns["completion_ids"] = [[] for _ in range(group)]
    for name, function in rewards:
        call_reward(name, function, [record["prompt"]] * group, [empty] * group, columns)


def needs_reference(train_cfg) -> bool:
    """DPO always compares with its reference; GRPO only for its KL term (beta > 0)."""
    return train_cfg.objective == DPO.name or (train_cfg.objective == GRPO.name
                                               and bool(train_cfg.beta))


def reference_weights(ref: str, *, full: bool, start: dict, adapter_constants: dict) -> dict:
    """The REF_PREFIX entries for `frozen`: start holds the trained params as the run starts."""
    if ref not in REFS:
        raise GlassformerError(f"--ref must be one of {', '.join(REFS)}, got {ref!r}")
    if full:
        # the policy trains every weight: the reference is a copy of where it started
        return {REF_PREFIX + key: np.array(value) for key, value in start.items()}
    if ref == "base":
        return {}
    frozen_adapter = {**start, **adapter_constants}
    return {REF_PREFIX + key: np.array(value) for key, value in frozen_adapter.items()}
