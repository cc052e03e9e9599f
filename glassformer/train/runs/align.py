"""What a fine-tuning run needs for the alignment objectives (DPO, GRPO) beyond SFT's.

    align_data         the data file read for the objective: preference pairs (DPO) split into
                       train and val, as finetune's encode_data does for chat data
    check_align_shards --workers N: whole pairs (DPO) or groups (GRPO) per rank
    reference_weights  the frozen entries that hold the reference (train/objectives/dpo.py):
                       none for the default (adapters off), the starting adapter for
                       `--ref adapter`, a copy of every starting weight for a --full run

train/runs/finetune.py calls these; the objectives themselves know nothing of run folders.
"""
from __future__ import annotations

from pathlib import Path

from glassformer.errors import GlassformerError
from glassformer.tokenizers.chat_template import chat_template_of
from glassformer.train.datasets.prefs import encode_pref_file, split_prefs
from glassformer.train.datasets.prompts import encode_prompt_file, split_prompts
from glassformer.train.objectives import objective_of
from glassformer.train.objectives.dpo import DPO
from glassformer.train.objectives.grpo import GRPO
from glassformer.train.objectives.ranks import check_whole_units
from glassformer.train.rewards import call_reward, load_rewards

ALIGN_OBJECTIVES = (DPO.name, GRPO.name)


def template_or_none(tokenizer, budget=None):
    """The model's chat template (rendered within `budget`), or None for a model that has none
    (plain-text data only)."""
    try:
        return chat_template_of(tokenizer, budget)
    except GlassformerError:
        return None


def align_data(path: str | Path, model, train_cfg, template_budget=None) -> tuple:
    """(train data, val data) of an alignment objective's data file, every setting and (GRPO)
    every reward function checked first, so a refused run writes nothing."""
    check_whole_units(objective_of(train_cfg.objective), train_cfg.batch_size, train_cfg.workers)
    template = template_or_none(model.tokenizer, template_budget)
    if train_cfg.objective == DPO.name:
        if template is None:
            raise GlassformerError("DPO renders the pairs with the model's chat template, and "
                                   "this model has none")
        data = encode_pref_file(path, model.tokenizer, template,
                                block_size=train_cfg.block_size)
        return split_prefs(data)
    settings = train_cfg.objective_settings
    rewards = load_rewards(settings.reward)
    data = encode_prompt_file(path, model.tokenizer, template, block_size=train_cfg.block_size,
                              max_completion_tokens=settings.max_completion_tokens)
    probe_rewards(rewards, data.records[0], settings.num_generations, data.conversational)
    return split_prompts(data)


def probe_rewards(rewards: list, record: dict, group: int, conversational: bool) -> None:
    """Each reward function on one group of empty completions of the first prompt: a function
    that raises or answers with the wrong length is refused before anything is written."""
    empty = [{"role": "assistant", "content": ""}] if conversational else ""
    columns = {key: [value] * group for key, value in record.items() if key != "prompt"}
    columns["completion_ids"] = [[] for _ in range(group)]
    for name, function in rewards:
        call_reward(name, function, [record["prompt"]] * group, [empty] * group, columns)


