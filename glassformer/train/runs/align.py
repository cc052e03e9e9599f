"""What a fine-tuning run needs for the alignment objectives (DPO, GRPO) beyond SFT's.

    align_data         the data file read for the objective: preference pairs (DPO) split into
                       train and val, as finetune's encode_data does for chat data
    reference_weights  the frozen entries that hold the reference (train/objectives/dpo.py):
                       none for the default (adapters off), the starting adapter for
                       `--ref adapter`, a copy of every starting weight for a --full run

train/runs/finetune.py calls these; the objectives themselves know nothing of run folders.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from glassformer.errors import GlassformerError
from glassformer.generate.templates import chat_template_of
from glassformer.train.datasets.prefs import encode_pref_file, split_prefs
from glassformer.train.objectives.dpo import DPO, REF_PREFIX

ALIGN_OBJECTIVES = (DPO.name,)
REFS = ("base", "adapter")   # --ref: the model with the adapters off, or the starting adapter


def align_data(path: str | Path, model, train_cfg) -> tuple:
    """(train data, val data) of an alignment objective's data file."""
    if train_cfg.objective == DPO.name:
        data = encode_pref_file(path, model.tokenizer, chat_template_of(model.tokenizer),
                                block_size=train_cfg.block_size)
        return split_prefs(data)
    raise GlassformerError(f"no data reader for objective {train_cfg.objective!r}")


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
