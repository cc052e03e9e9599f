"""A sequence-to-sequence training run: `glassformer train --arch transformer --data PAIRS`.

PAIRS is `cmudict`, `tang-couplets:PATH` or a TSV file (train/pairs.py). A new run:

    read the pairs -> one pair tokenizer over every split's symbols (so any test source can be
    encoded; no target is seen) -> the model's context = the longest source or decoder input of
    any split -> lock the run folder -> tokenizer, data record -> encode train and val -> train

The loop is train/loop.py's, with the "seq2seq" objective (train/pairs.py's SEQ2SEQ). TrainConfig.block_size is set to the model's context (each batch is only as long
as its longest pair; block_size only sizes the memory estimate).

The run's data record (data.json) names the pairs (`cmudict`, `tang-couplets:PATH` or the TSV
path), how many there are and a sha256 of their text; a resume reads them again and refuses
different pairs unless --allow-new-data.

G2P_RECIPE: the defaults of `--arch transformer`, sized to finish within 20 minutes on a quiet
2-core machine (docs/seq2seq.md has its numbers).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Callable

import numpy as np

from glassformer.errors import GlassformerError
from glassformer.io.safetensors import write_atomically
from glassformer.models.seq2seq import Seq2SeqConfig
from glassformer.tokenizers.pairs import BOS_ID, EOS_ID, PAD_ID, PairTokenizer
from glassformer.train.checks import check_train_config, check_training_memory
from glassformer.train.lock import hold_run_folder
from glassformer.train.loop import RunState, TrainConfig, new_run, train
from glassformer.train.pairs import PairData, PairSet, encode_pairs, read_pairs, split_pairs
from glassformer.train.step import IN_PROCESS, Steps

DATA_RECORD = "data.json"
# `--arch transformer` defaults (TrainConfig fields): the G2P recipe
G2P_RECIPE = dict(objective="seq2seq", label_smoothing=0.1, schedule="cosine",
                  batch_size=64, lr=1e-3, warmup_iters=400, max_iters=10000, min_lr=1e-4,
                  lr_decay_iters=10000, weight_decay=0.01, beta1=0.9, beta2=0.98,
                  eval_interval=500, eval_iters=10)
# `--arch transformer` model defaults (Seq2SeqConfig fields)
G2P_MODEL = dict(n_layer=3, n_head=4, d_model=128, dropout=0.1)
NEEDS_DATA = ("--arch transformer needs --data: cmudict, tang-couplets:PATH or a TSV file of "
              "source<TAB>target lines")


def with_seq2seq_defaults(train: dict, model: dict) -> tuple[dict, dict]:
    """A new run's given settings, completed by the G2P recipe when it trains a transformer;
    the seq2seq objective on another family, or a transformer with another objective, is refused
    in one line."""
    arch, objective = model.get("arch"), train.get("objective")
    if objective == "seq2seq" and arch != "transformer":
        raise GlassformerError(f"--objective seq2seq trains an encoder-decoder: give --arch "
                               f"transformer (got --arch {arch or 'gpt2'})")
    if arch != "transformer":
        return train, model
    if objective not in (None, "seq2seq"):
        raise GlassformerError(f"--arch transformer trains with --objective seq2seq, got "
                               f"--objective {objective}")
    return {**G2P_RECIPE, **train}, {**G2P_MODEL, **model}


def transformer_config(flags: dict, vocab_size: int, max_seq_len: int) -> Seq2SeqConfig:
    """The paper's encoder-decoder (post-norm, sinusoids, shared embeddings) from the model
    flags, with the pair tokenizer's special ids."""
    return Seq2SeqConfig(vocab_size=vocab_size, max_seq_len=max_seq_len,
                         n_layer=flags["n_layer"], n_head=flags["n_head"],
                         d_model=flags["d_model"], dropout=flags["dropout"], pad_id=PAD_ID,
                         eos_id=EOS_ID, decoder_start_id=BOS_ID)


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


def _write_record(out: Path, record: dict) -> None:
    text = json.dumps(record, indent=1).encode("utf-8")
    write_atomically(out / DATA_RECORD, lambda f: f.write(text))


def run_pairs_training(*, data: str | None, out_dir: str,
                       model_cfg_for: Callable[[int, int], object], train_cfg: TrainConfig,
                       on_start=None, on_step=None, should_stop=None,
                       steps: Steps = IN_PROCESS) -> tuple[RunState, object]:
    """Start a new seq2seq run and train it; returns (final RunState, model config).

    model_cfg_for(vocab_size, max_seq_len) builds the model config once the pairs are read.
    """
    if not data:
        raise GlassformerError(NEEDS_DATA)
    out = Path(out_dir)
    pairs = read_pairs(data)
    splits = split_pairs(pairs)
    tokenizer = PairTokenizer.from_pairs(pairs.sources, pairs.targets, pairs.target_split)
    context = model_context(splits, tokenizer)
    train_cfg = dataclasses.replace(train_cfg, block_size=context)
    check_train_config(train_cfg)
    model_cfg = model_cfg_for(tokenizer.vocab_size, context)
    check_training_memory(model_cfg, train_cfg)
    with hold_run_folder(out):  # note: nothing is written into `out` before this line
        if (out / "latest").exists():
            raise GlassformerError(f"{out} already holds a run; pass --resume to continue it or "
                                   "choose another --out")
        path = tokenizer.save(out / "tokenizer")
        layout = json.loads(path.read_text(encoding="utf-8"))
        _write_record(out, pairs_record(pairs))
        train_data, val_data = encoded_splits(splits, tokenizer, train_cfg.batch_size)
        run = new_run(model_cfg, train_cfg)
        if on_start:
            on_start(train_cfg.max_iters, run.it)
        run = train(model_cfg, train_cfg, run, train_data=train_data, val_data=val_data,
                    out_dir=out, tokenizer_json=layout, on_step=on_step,
                    should_stop=should_stop, steps=steps)
    return run, model_cfg


def resume_pair_data(out: Path, data: str | None, allow_new_data: bool,
                     tokenizer: PairTokenizer, batch_size: int
                     ) -> tuple[PairData, PairData, dict, str | None]:
    """(train, val, the data record, a note when the pairs are not the recorded ones) for a
    resumed run."""
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
        _write_record(out, now)
        note = f"training on {now['path']} ({now['pairs']:,} pairs) (--allow-new-data)"
    train_data, val_data = encoded_splits(split_pairs(pairs), tokenizer, batch_size)
    return train_data, val_data, now, note
