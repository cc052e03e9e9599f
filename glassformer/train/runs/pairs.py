"""A sequence-to-sequence training run: `glassformer train --arch transformer --data PAIRS`.

PAIRS is `cmudict`, `tang-couplets:PATH` or a TSV file (train/datasets/pairs.py). A new run:

    read the pairs -> one pair tokenizer over every split's symbols (so any test source can be
    encoded; no target is seen) -> the model's context = the longest source or decoder input of
    any split -> lock the run folder -> tokenizer, data record -> encode train and val -> train

The loop is train/loop.py's, with the "seq2seq" objective (train/objectives/seq2seq.py) or
another that reads PAIRS. TrainConfig.block_size is set to the model's context (each batch is
only as long as its longest pair; block_size only sizes the memory estimate).

The run's data record (data.json) names the pairs (`cmudict`, `tang-couplets:PATH` or the TSV
path), how many there are and a sha256 of their text; a resume reads them again and refuses
different pairs unless --allow-new-data.

The G2P recipe (the defaults of `--arch transformer`) is in train/recipes/.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Callable

from glassformer.errors import GlassformerError
from glassformer.models.registry import family as family_of
from glassformer.tokenizers.pairs import PairTokenizer
from glassformer.train.datasets.pairs import (PairData, PairSet, encode_pairs, pairs_held_out,
                                              read_pairs, split_pairs)
from glassformer.train.loop import RunState, TrainConfig, new_run
from glassformer.train.objectives import objective_of
from glassformer.train.runs.checks import check_train_config, check_training_memory
from glassformer.train.runs.folder import (DATA_RECORD, RunHooks, hold_run_folder,
                                           log_held_out, refuse_existing_run, run_folder,
                                           train_in_folder, write_data_record)
from glassformer.train.step import IN_PROCESS, Steps

NEEDS_DATA = ("--arch transformer needs --data: cmudict, tang-couplets:PATH or a TSV file of "
              "source<TAB>target lines")


def pairs_record(pairs: PairSet) -> dict:
    """{"path", "pairs", "sha256"}: what a resume checks its pairs against."""
    digest = hashlib.sha256()
    for source, target in zip(pairs.sources, pairs.targets):
        digest.update(f"{source}\t{target}\n".encode("utf-8"))
    return {"path": pairs.name, "pairs": len(pairs.sources), "sha256": digest.hexdigest()}


def model_context(splits: dict[str, PairSet], tokenizer: PairTokenizer) -> int:
    """The longest source or decoder input (<s> + target) over every split."""
    sources = max(len(tokenizer.encode(s)) for part in splits.values() for s in part.sources)
    targets = max(len(tokenizer.encode_target(t)) + 1
                  for part in splits.values() for t in part.targets)
    return max(sources, targets)


def encoded_splits(splits: dict[str, PairSet], tokenizer: PairTokenizer, batch_size: int
                   ) -> tuple[PairData, PairData]:
    """(train, val) encoded; each must hold at least one batch."""
    encoded = []
    for name in ("train", "val"):
        part = splits[name]
        if len(part.sources) < batch_size:
            raise GlassformerError(f"the {name} split of {part.name} has {len(part.sources)} "
                                   f"pairs, fewer than batch size {batch_size}; use a smaller "
                                   "--batch-size or more pairs")
        encoded.append(encode_pairs(part, tokenizer))
    return encoded[0], encoded[1]


def run_pairs_training(*, data: str | None, out_dir: str,
                       model_cfg_for: Callable[[int, int], object], train_cfg: TrainConfig,
                       on_start=None, on_step=None, should_stop=None,
                       steps: Steps = IN_PROCESS, objective=None) -> tuple[RunState, object]:
    """Start a new seq2seq run and train it; returns (final RunState, model config).
    objective: train_cfg.objective's record, as the run's start resolved it (None: looked up).

    model_cfg_for(vocab_size, max_seq_len) builds the model config once the pairs are read.
    """
    hooks = RunHooks(on_start=on_start, on_step=on_step, should_stop=should_stop, steps=steps)
    if not data:
        raise GlassformerError(NEEDS_DATA)
    out = run_folder(out_dir)
    pairs = read_pairs(data)
    splits = split_pairs(pairs)
    tokenizer = PairTokenizer.from_pairs(pairs.sources, pairs.targets, pairs.target_split)
    context = model_context(splits, tokenizer)
    train_cfg = dataclasses.replace(train_cfg, block_size=context)
    check_train_config(train_cfg)
    model_cfg = model_cfg_for(tokenizer.vocab_size, context)
    objective = objective or objective_of(train_cfg.objective)
    objective.check(family_of(model_cfg.ARCH), model_cfg, tokenizer)
    check_training_memory(model_cfg, train_cfg)
    with hold_run_folder(out):  # note: nothing is written into `out` before this line
        refuse_existing_run(out)
        path = tokenizer.save(out / "tokenizer")
        layout = json.loads(path.read_text(encoding="utf-8"))
        write_data_record(out, pairs_record(pairs))
        train_data, val_data = encoded_splits(splits, tokenizer, train_cfg.batch_size)
        log_held_out(out, pairs_held_out(train_data, val_data))
        run = new_run(model_cfg, train_cfg)
        run = train_in_folder(out, model_cfg, train_cfg, run, (train_data, val_data), layout,
                              hooks, objective=objective)
    return run, model_cfg


def resume_pair_data(out: Path, data: str | None, allow_new_data: bool,
                     tokenizer: PairTokenizer, layout: dict, train_cfg: TrainConfig,
                     objective=None) -> tuple:
    """A resumed run's (train, val, None: no bits per byte, data record, a note when the pairs
    are not the recorded ones)."""
    try:
        record = json.loads((out / DATA_RECORD).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        raise GlassformerError(f"{out / DATA_RECORD} is missing or not valid JSON") from None
    pairs = read_pairs(data or record["path"])
    now = pairs_record(pairs)
    note = None
    if now != record:
        if not allow_new_data:
            raise GlassformerError(
                f"the run in {out} trains on {record['path']} ({record['pairs']:,} pairs, "
                f"sha256 {record['sha256'][:12]}), got {now['path']} ({now['pairs']:,} pairs, "
                f"sha256 {now['sha256'][:12]}); pass --allow-new-data to train on them anyway")
        write_data_record(out, now)
        note = f"training on {now['path']} ({now['pairs']:,} pairs) (--allow-new-data)"
    train_data, val_data = encoded_splits(split_pairs(pairs), tokenizer, train_cfg.batch_size)
    return train_data, val_data, None, now, note
