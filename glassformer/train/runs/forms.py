"""The forms of data a run trains on, one `Form` record each: what the run code calls instead of
asking which objective it runs.

An objective names its form (Objective.reads, train/objectives/objective.py); a form says

    read      finetune: read(path, tokenizer, train_cfg, template_budget) -> Read
              the data file encoded, every line checked (errors name the line), split into
              train and val, with the notes the run prints (conversations cut, left out)
    held_out  held_out(train, val) -> the line the log states the val split in, once, at a
              run's start ("held out: the last 35 of 703 pairs (5%)"); None for a token stream
    records   batched as records: a training batch is the next B records of the run's seeded
              shuffled epochs, an eval batch the split in order (train/datasets/epochs.py),
              a function of the iteration alone; a token stream gives random windows (nanoGPT)
    start     train: a new `glassformer train` run of this data (runs/text.py, runs/pairs.py)
    resume    train: (out, data, allow_new_data, tokenizer, layout, train_cfg) -> (train, val,
              val tokens per byte or None, data record, note or None), the data read again
              (finetune reads again with `read`: the same file, the same split)

    form      file                          split (val)                          batches
    text      UTF-8 text -> token ids       the last 10% of the tokens           random windows
    pairs     cmudict, tang-couplets, TSV   5% by a hash of the source           epochs, by length
    chat      {"messages": [...]}           the last 5% of the conversations     epochs
    prefs     {"prompt", "chosen", ...}     the last 5% of the pairs             epochs
    prompts   {"prompt": ...} + columns     the last 5% of the prompts           epochs

A new form is a reader in train/datasets/, a draw in its objective that takes the records of
datasets/epochs.batch_rows, and one record here.
"""
from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Callable, NamedTuple

import numpy as np

from glassformer.errors import GlassformerError
from glassformer.tokenizers.chat_template import chat_template_of
from glassformer.train.data import read_text, split_windows
from glassformer.train.datasets.chat import ChatData, encode_chat_file, split_chat
from glassformer.train.datasets.pairs import pairs_held_out
from glassformer.train.datasets.prefs import (PrefData, check_pref_file, encode_pref_file,
                                              split_prefs)
from glassformer.train.datasets.prompts import PromptData, encode_prompt_file, split_prompts
from glassformer.train.loop import TrainConfig
from glassformer.train.objectives.objective import CHAT, PAIRS, PREFS, PROMPTS, TEXT
from glassformer.train.recipes import model_config
from glassformer.train.rewards import load_rewards, probe_rewards
from glassformer.train.runs.pairs import resume_pair_data, run_pairs_training
from glassformer.train.runs.text import resume_text_data, run_training


class Read(NamedTuple):
    """A data file read for a run: its two splits, and what the run prints about them."""
    train: object
    val: object
    notes: tuple[str, ...] = ()    # lines for on_note (conversations cut or left out)


class Form(NamedTuple):
    """How one form of data is read, checked, split, batched and resumed (module docstring)."""
    name: str                        # as Objective.reads spells it
    records: bool                    # shuffled epochs of records (else random windows)
    read: Callable | None = None     # read(path, tokenizer, train_cfg, template_budget) -> Read
    held_out: Callable | None = None   # held_out(train, val) -> the log's line
    start: Callable | None = None    # a new `glassformer train` run of this data
    resume: Callable | None = None   # a resumed `glassformer train` run's data
    check: Callable | None = None    # finetune: check(path), the lines' structure, before the
                                     # model loads (read checks everything again, after)


def last_share(unit: str, n_train: int, n_val: int) -> str:
    """The line for a split whose val is the last records of the file."""
    total = n_train + n_val
    return f"held out: the last {n_val:,} of {total:,} {unit} ({round(100 * n_val / total)}%)"


# --- text -------------------------------------------------------------------------------------

def read_text_ids(path, tokenizer, train_cfg: TrainConfig, template_budget=None) -> Read:
    """A fine-tune's plain text: one token stream, the last 10% val (train/data.py)."""
    ids = np.asarray(tokenizer.encode(read_text(path)), dtype=np.int64)
    return Read(*split_windows(ids, train_cfg.block_size, path))


def start_text_run(*, model: dict, train_cfg: TrainConfig, **options):
    """A TEXT objective's new run: the model's context is the block size."""
    return run_training(model_cfg_for=partial(model_config, model,
                                              max_seq_len=train_cfg.block_size),
                        train_cfg=train_cfg, **options)


# --- pairs ------------------------------------------------------------------------------------

def start_pairs_run(*, model: dict, train_cfg: TrainConfig, init=None, tokenizer=None,
                    after_init=None, **options):
    """A PAIRS objective's new run: the pairs bring their own vocabulary and context (the command
    refuses --init and --tokenizer for it), and no recipe rewrites its init."""
    return run_pairs_training(model_cfg_for=partial(model_config, model), train_cfg=train_cfg,
                              **options)


# --- chat, preference pairs, prompts ----------------------------------------------------------

def template_or_none(tokenizer, budget=None):
    """The model's chat template (rendered within `budget`), or None for a model that has none
    (plain-text prompts only)."""
    try:
        return chat_template_of(tokenizer, budget)
    except GlassformerError:
        return None


def read_chat(path, tokenizer, train_cfg: TrainConfig, template_budget=None) -> Read:
    """Chat conversations with loss on the replies (datasets/chat.py), the last 5% val."""
    data = encode_chat_file(path, tokenizer, chat_template_of(tokenizer, template_budget),
                            block_size=train_cfg.block_size)
    notes = []
    if data.skipped:
        notes.append(f"{data.skipped:,} conversations have an empty assistant turn and were "
                     "left out (an empty reply has nothing to learn)")
    if data.truncated:
        notes.append(f"{data.truncated:,} conversations are longer than block size "
                     f"{train_cfg.block_size} + 1 ids and were cut (their tails get no loss)")
    return Read(*split_chat(data), tuple(notes))


def chat_held_out(train: ChatData, val: ChatData) -> str:
    return last_share("conversations", len(train.lengths), len(val.lengths))


def read_prefs(path, tokenizer, train_cfg: TrainConfig, template_budget=None) -> Read:
    """Preference pairs rendered with the chat template (datasets/prefs.py), the last 5% val;
    so a refused run reads nothing."""
    template = template_or_none(tokenizer, template_budget)
    if template is None:
        raise GlassformerError("DPO renders the pairs with the model's chat template, and "
                               "this model has none")
    data = encode_pref_file(path, tokenizer, template, block_size=train_cfg.block_size)
    return Read(*split_prefs(data))


def prefs_held_out(train: PrefData, val: PrefData) -> str:
    return last_share("pairs", train.n, val.n)


def read_prompts(path, tokenizer, train_cfg: TrainConfig, template_budget=None) -> Read:
    """GRPO's prompts (datasets/prompts.py), the last 5% val; every reward function is checked
    first (rewards/probe_rewards), so a refused run writes nothing."""
    settings = train_cfg.objective_settings
    rewards = load_rewards(settings.reward)
    data = encode_prompt_file(path, tokenizer, template_or_none(tokenizer, template_budget),
                              block_size=train_cfg.block_size,
                              max_completion_tokens=settings.max_completion_tokens)
    probe_rewards(rewards, data.records[0], settings.num_generations, data.conversational)
    return Read(*split_prompts(data))


def prompts_held_out(train: PromptData, val: PromptData) -> str:
    return last_share("prompts", len(train.records), len(val.records))


# name -> Form, one line each
FORMS: dict[str, Form] = {
    TEXT: Form(TEXT, records=False, read=read_text_ids, start=start_text_run,
               resume=resume_text_data),
    PAIRS: Form(PAIRS, records=True, held_out=pairs_held_out, start=start_pairs_run,
                resume=resume_pair_data),
    CHAT: Form(CHAT, records=True, read=read_chat, held_out=chat_held_out),
    PREFS: Form(PREFS, records=True, read=read_prefs, held_out=prefs_held_out,
                check=check_pref_file),
    PROMPTS: Form(PROMPTS, records=True, read=read_prompts, held_out=prompts_held_out),
}


def form_of(name: str) -> Form:
    """The Form an objective's `reads` names."""
    if name not in FORMS:
        raise GlassformerError(f"unknown data form {name!r}; known: {sorted(FORMS)}")
    return FORMS[name]


def read_for(form: Form, path: str | Path, tokenizer, train_cfg: TrainConfig,
             template_budget=None) -> Read:
    """form.read, or one line for a form `glassformer finetune` does not read."""
    if form.read is None:
        raise GlassformerError(f"glassformer finetune does not read {form.name} data; "
                               "train on it with glassformer train")
    return form.read(path, tokenizer, train_cfg, template_budget)
