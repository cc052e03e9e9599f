"""A whole training run from a text file: checks, lock, tokenizer, token file, model, loop, plot.

This is what `glassformer train` calls. With no data file it trains on glassformer's own source
code (the .py files of the installed package), a corpus that is always there and is ours to use.

    run_training     a new run: every setting is checked (types, ranges, a memory estimate)
                     before anything is written, then the run folder is locked and filled
    resume_training  continue the run in a folder as it was: the saved training config is the
                     default for every setting; only SAFE_ON_RESUME may be changed (and the change
                     is logged), anything else that differs is refused naming both values

--tokenizer (run_training's `tokenizer`): a tokenizer glassformer loads (tokenizers/load.py: a
folder or file, or a name such as gpt2) instead of the default char vocabulary built from the
data. The model's vocab_size is then the tokenizer's padded up to a multiple of VOCAB_MULTIPLE
(nanoGPT's 50,257 -> 50,304; generation never samples the padding ids). The run saves the
tokenizer (run/tokenizer/ and every checkpoint's tokenizer.json) and a resume keeps it: a resume
given another tokenizer is refused.

The run folder records its data file's path, size and sha256 (data.json); a resume refuses a
changed or different file unless allow_new_data. Only one process writes a run folder at a time
(train/lock.py).
"""
from __future__ import annotations

import hashlib
import json
import math
import os
import tempfile
from pathlib import Path
from typing import Callable

import numpy as np

from glassformer.errors import GlassformerError
from glassformer.io.checkpoint import (append_train_log, load_checkpoint, read_train_log,
                                       resolve_checkpoint)
from glassformer.io.pretrained import load_pretrained
from glassformer.io.safetensors import write_atomically
from glassformer.models.registry import config_from_dict
from glassformer.tokenizers.bpe import BPETokenizer
from glassformer.tokenizers.char import CharTokenizer
from glassformer.tokenizers.byte_lengths import token_byte_lengths, tokens_per_byte
from glassformer.tokenizers.load import load_tokenizer
from glassformer.train.checks import (check_model_flags, check_train_config,
                                      check_training_memory, resumed_config,
                                      train_config_from_dict)
from glassformer.train.data import file_fingerprint, prepare_tokens, read_text, split_train_val
from glassformer.train.lock import hold_run_folder
from glassformer.train.mlm import SPECIALS as MLM_SPECIALS
from glassformer.train.mlm import check_mlm_vocabulary, mlm_data
from glassformer.train.loop import RunState, TrainConfig, new_run, resume_run, train
from glassformer.train.pairs_run import resume_pair_data
from glassformer.train.step import IN_PROCESS, Steps

DATA_RECORD = "data.json"          # {"path", "size", "sha256"} of the file the run trains on
LEGACY_DATA_RECORD = "data_source.txt"  # older runs: the data path alone
VOCAB_MULTIPLE = 64  # a --tokenizer run's model vocab is padded up to a multiple of this


def default_corpus_text() -> str:
    """The package's own source, concatenated in a fixed order."""
    package = Path(__file__).resolve().parents[1]
    return "".join(f.read_text(encoding="utf-8") for f in sorted(package.rglob("*.py")))


def write_default_corpus(out_dir: Path, text: str) -> Path:
    """Write the default corpus to out_dir/default_corpus.txt (unless it is already there)."""
    path = out_dir / "default_corpus.txt"
    if not path.is_file() or path.read_text(encoding="utf-8") != text:
        path.write_text(text, encoding="utf-8")
    return path


def _run_folder(out_dir: str | os.PathLike) -> Path:
    if not str(out_dir).strip():
        raise GlassformerError("--out must name a run folder, got an empty string")
    return Path(out_dir)


def _fingerprint(tokenizer_layout: dict) -> str:
    raw = json.dumps(tokenizer_layout, sort_keys=True, ensure_ascii=False).encode("utf-8")
    return hashlib.sha256(raw).hexdigest()[:16]


def padded_vocab(vocab_size: int) -> int:
    """A --tokenizer run's model vocab: the tokenizer's, rounded up to VOCAB_MULTIPLE."""
    return -(-vocab_size // VOCAB_MULTIPLE) * VOCAB_MULTIPLE


def _tokens(data_path: Path, out_dir: Path, tokenizer, layout: dict, block_size: int):
    """(train ids, val ids, the val split's tokens per UTF-8 byte)."""
    try:
        tokens = prepare_tokens(data_path, out_dir / "tokens.npy", encode=tokenizer.encode,
                                vocab_size=tokenizer.vocab_size, fingerprint=_fingerprint(layout),
                                in_pieces=isinstance(tokenizer, (BPETokenizer, CharTokenizer)))
    except GlassformerError as err:
        if str(err).startswith(("data file", "token file")):
            raise
        raise GlassformerError(f"the run's tokenizer cannot encode {data_path}: {err}") from None
    train_data, val_data = split_train_val(tokens)
    for split, part in (("train", train_data), ("val", val_data)):
        if len(part) < block_size + 1:
            raise GlassformerError(
                f"the {split} split of {data_path} has {len(part)} tokens, fewer than block size "
                f"{block_size} + 1; use a smaller --block-size or more data")
    ratio = tokens_per_byte(val_data, token_byte_lengths(tokenizer))
    return train_data, val_data, (ratio if math.isfinite(ratio) else None)


def _tokenizer_layout(tokenizer, out_dir: Path) -> dict:
    """The tokenizer's own JSON (what a checkpoint stores as tokenizer.json)."""
    folder = out_dir / "tokenizer"
    path = tokenizer.save(folder)
    if path.name != "tokenizer.json":
        path = folder / "tokenizer.json"
    if not path.is_file():
        raise GlassformerError(f"the {type(tokenizer).__name__} cannot be stored as "
                               "tokenizer.json, so it cannot go into a checkpoint")
    return json.loads(path.read_text(encoding="utf-8"))


def _start_from(init: str | None, text: str, model_cfg_for, tokenizer_path: str | None = None,
                special_tokens: tuple[str, ...] = ()):
    """(model config, params or None, tokenizer) for a new run (special_tokens: the default char
    vocabulary's, after its characters)."""
    if init is not None and tokenizer_path is not None:
        raise GlassformerError("--init brings its model's own tokenizer; give --init or "
                               "--tokenizer, not both")
    if tokenizer_path is not None:
        tokenizer = load_tokenizer(tokenizer_path)
        return model_cfg_for(padded_vocab(tokenizer.vocab_size)), None, tokenizer
    if init is None:
        tokenizer = CharTokenizer.from_text(text, special_tokens)
        return model_cfg_for(tokenizer.vocab_size), None, tokenizer
    model = load_pretrained(init)
    if model.arch not in ("gpt2", "llama"):
        raise GlassformerError(f"--init needs a causal LM (gpt2 or llama), got {model.arch}")
    if model.tokenizer is None:
        raise GlassformerError(f"{init} has no tokenizer, so the data cannot be encoded for it")
    # fresh row-major float32 copies: the same layout a resumed run reads back from its checkpoint
    params = {key: np.ascontiguousarray(value, dtype=np.float32).copy()
              for key, value in model.params.items()}
    return model.cfg, params, model.tokenizer


def _objective_data(train_cfg: TrainConfig, tokenizer, train_data, val_data, val_tpb):
    """What the objective's draw reads: the token streams, or for masked-LM the streams with the
    special ids masking needs (train/mlm.py). Masked-LM reports no bits per byte: its loss is
    on the masked tokens only, not a next-token code length."""
    if train_cfg.objective != "mlm":
        return train_data, val_data, val_tpb
    specials, vocab = tokenizer.special_tokens, tokenizer.vocab_size
    return mlm_data(train_data, specials, vocab), mlm_data(val_data, specials, vocab), None


def _write_data_record(out: Path, record: dict) -> None:
    text = json.dumps(record, indent=1).encode("utf-8")
    write_atomically(out / DATA_RECORD, lambda f: f.write(text))


def run_training(*, data: str | None, out_dir: str, model_cfg_for: Callable[[int], object],
                 train_cfg: TrainConfig, init: str | None = None, tokenizer: str | None = None,
                 on_start=None, on_step=None, should_stop=None,
                 steps: Steps = IN_PROCESS) -> tuple[RunState, object]:
    """Start a new run and train it; returns (final RunState, model config).

    model_cfg_for(vocab_size) builds the model config once the char tokenizer is known.
    init: a glassformer run/checkpoint, a Hugging Face folder or a .gguf file whose weights and
    tokenizer start a new run (fine-tuning).
    tokenizer: a tokenizer folder, file or name (tokenizers/load.py) to train with instead of the
    default char vocabulary (see the module docstring).
    on_start(max_iters, start_iter) is called once training is about to begin; on_step(record)
    after each logged record; should_stop() is asked once per iteration (train/signals.py).
    steps: how steps are computed (train/step.py; rank 0 of a data-parallel run passes
    train/distributed.py's).
    """
    out = _run_folder(out_dir)
    check_train_config(train_cfg)
    text = read_text(data) if data else default_corpus_text()
    # masked-LM: the char vocabulary gets BERT's [PAD] [UNK] [CLS] [SEP] [MASK] (train/mlm.py)
    specials = MLM_SPECIALS if train_cfg.objective == "mlm" else ()
    model_cfg, params, tokenizer = _start_from(init, text, model_cfg_for, tokenizer, specials)
    if train_cfg.objective == "mlm":
        check_mlm_vocabulary(tokenizer.special_tokens)   # before anything is written
    if model_cfg.max_seq_len < train_cfg.block_size:
        raise GlassformerError(f"block size {train_cfg.block_size} is longer than the model's "
                               f"context max_seq_len={model_cfg.max_seq_len}")
    check_training_memory(model_cfg, train_cfg)
    with hold_run_folder(out):  # note: nothing is written into `out` before this line
        if (out / "latest").exists():
            raise GlassformerError(f"{out} already holds a run; pass --resume to continue it or "
                                   "choose another --out")
        data_path = Path(data) if data else write_default_corpus(out, text)
        layout = _tokenizer_layout(tokenizer, out)
        _write_data_record(out, file_fingerprint(data_path))
        train_data, val_data, val_tpb = _tokens(data_path, out, tokenizer, layout,
                                                train_cfg.block_size)
        train_data, val_data, val_tpb = _objective_data(train_cfg, tokenizer, train_data,
                                                        val_data, val_tpb)
        run = new_run(model_cfg, train_cfg, params)
        if on_start:
            on_start(train_cfg.max_iters, run.it)
        run = train(model_cfg, train_cfg, run, train_data=train_data, val_data=val_data,
                    out_dir=out, tokenizer_json=layout, on_step=on_step,
                    should_stop=should_stop, steps=steps, val_tokens_per_byte=val_tpb)
    return run, model_cfg


def _read_data_record(out: Path) -> dict:
    """The run's data record; for runs older than data.json, the path alone."""
    path = out / DATA_RECORD
    if path.is_file():
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, ValueError):
            raise GlassformerError(f"{path} is not valid JSON") from None
        if not isinstance(record, dict) or not isinstance(record.get("path"), str):
            raise GlassformerError(f"{path} does not name the run's data file")
        return record
    legacy = out / LEGACY_DATA_RECORD
    if legacy.is_file():
        return {"path": legacy.read_text(encoding="utf-8").strip()}
    raise GlassformerError(f"{out} does not say which data file it was trained on ({DATA_RECORD} "
                           "is missing); pass --data")


def resume_data(out: Path, data: str | None, allow_new_data: bool) -> tuple[dict, str | None]:
    """(fingerprint of the data file to train on, a note when it is not the recorded one)."""
    record = _read_data_record(out)
    path = Path(data) if data else Path(record["path"])
    if not path.is_file():
        raise GlassformerError(f"data file {path} does not exist (the run in {out} trains on "
                               f"{record['path']})")
    now = file_fingerprint(path)
    if now["path"] != record["path"] and not allow_new_data:
        raise GlassformerError(f"the run in {out} trains on {record['path']}, got --data {path}; "
                               "pass --allow-new-data to continue it on another file")
    same = now["size"] == record.get("size") and now["sha256"] == record.get("sha256")
    if not same and "sha256" in record and not allow_new_data:
        raise GlassformerError(
            f"data file {path} changed since the run started ({record['size']:,} -> "
            f"{now['size']:,} bytes, sha256 {record['sha256'][:12]} -> {now['sha256'][:12]}); "
            "pass --allow-new-data to train on it anyway")
    if now == record:
        return now, None
    _write_data_record(out, now)
    if "sha256" not in record and now["path"] == record["path"]:
        return now, f"recorded the size and sha256 of {path}"
    return now, (f"training on {path} ({now['size']:,} bytes, sha256 {now['sha256'][:12]}) "
                 f"instead of {record['path']} (--allow-new-data)")


def saved_train_config(out_dir: str | os.PathLike) -> TrainConfig:
    """The training settings the run in `out_dir` was last saved with, read from its latest
    state.json alone (no tensors, no verification: resume_training verifies everything). For a
    launcher that must know them before training, e.g. how many processes a resume runs on."""
    folder = resolve_checkpoint(out_dir)
    try:
        state = json.loads((folder / "state.json").read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise GlassformerError(f"{folder / 'state.json'} is not valid JSON") from None
    return train_config_from_dict(state.get("train_config", {}))


def check_same_tokenizer(out: Path, saved_layout: dict, tokenizer_path: str) -> None:
    """Refuse a resume given a tokenizer that is not the run's own (compared by their JSON)."""
    given = load_tokenizer(tokenizer_path)
    with tempfile.TemporaryDirectory() as folder:
        layout = _tokenizer_layout(given, Path(folder))
    if _fingerprint(layout) != _fingerprint(saved_layout):
        raise GlassformerError(
            f"--resume keeps the run's tokenizer: the run in {out} was trained with tokenizer "
            f"{_fingerprint(saved_layout)}, got --tokenizer {tokenizer_path} "
            f"({_fingerprint(layout)}, {given.vocab_size:,} ids); drop --tokenizer, or start a "
            "new run with another --out")


def resume_training(*, out_dir: str, data: str | None = None, given: dict | None = None,
                    given_model: dict | None = None, allow_new_data: bool = False,
                    tokenizer: str | None = None,
                    on_note=None, on_start=None, on_step=None,
                    should_stop=None, steps: Steps = IN_PROCESS) -> tuple[RunState, object]:
    """Continue the run in `out_dir` from its last checkpoint; returns (RunState, model config).

    given: training settings given explicitly ({"max_iters": 4000}); the saved ones fill the
    rest (see resumed_config). given_model: model settings given explicitly, which must match the
    checkpoint's model. data: None trains on the recorded file. on_note(line) receives what the
    resume changed (also appended to the train log). tokenizer: as given on the command line; it
    must be the run's own (check_same_tokenizer).
    """
    out = _run_folder(out_dir)
    if not out.is_dir():
        raise GlassformerError(f"there is no run to resume: {out} does not exist")
    with hold_run_folder(out):
        ckpt = load_checkpoint(out)
        model_cfg = config_from_dict(ckpt.config)
        check_model_flags(ckpt.config, given_model or {})
        if tokenizer is not None:
            check_same_tokenizer(out, ckpt.tokenizer_json, tokenizer)
        saved = train_config_from_dict(ckpt.state["train_config"])
        train_cfg, changed = resumed_config(saved, given or {})
        check_train_config(train_cfg)
        seq2seq = train_cfg.objective == "seq2seq"  # pairs, not a text file (train/pairs_run.py)
        if seq2seq:
            run_tokenizer = load_tokenizer(ckpt.path)
            train_data, val_data, data_record, data_note = resume_pair_data(
                out, data, allow_new_data, run_tokenizer, train_cfg.batch_size)
        else:
            data_record, data_note = resume_data(out, data, allow_new_data)
        run = resume_run(ckpt)
        if changed or data_note:
            entry = {"iter": run.it, "resumed_with": changed}
            if data_note:
                entry["data"] = data_record
            append_train_log(out, entry)
        if on_note:
            on_note(f"resuming {out} at iteration {run.it} of {saved.max_iters}")
            for name, (old, new) in changed.items():
                on_note(f"--{name.replace('_', '-')} {new} (the run had {old})")
            if data_note:
                on_note(data_note)
        layout = ckpt.tokenizer_json
        val_tpb = None
        if not seq2seq:
            run_tokenizer = load_tokenizer(ckpt.path)
            train_data, val_data, val_tpb = _tokens(Path(data_record["path"]), out,
                                                    run_tokenizer, layout, train_cfg.block_size)
            train_data, val_data, val_tpb = _objective_data(train_cfg, run_tokenizer, train_data,
                                                            val_data, val_tpb)
        if on_start:
            on_start(train_cfg.max_iters, run.it)
        run = train(model_cfg, train_cfg, run, train_data=train_data, val_data=val_data,
                    out_dir=out, tokenizer_json=layout, on_step=on_step,
                    should_stop=should_stop, steps=steps, val_tokens_per_byte=val_tpb)
    return run, model_cfg


def plot_loss_curve(out_dir: str | Path) -> Path | None:
    """Write out_dir/loss.png from train_log.jsonl; None when matplotlib is not installed."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        from matplotlib import pyplot as plt
    except ImportError:
        return None
    records = read_train_log(out_dir)
    train_pts = [(r["iter"], r["train_loss"]) for r in records if "train_loss" in r]
    val_pts = [(r["iter"], r["val_loss"]) for r in records if "val_loss" in r]
    fig, ax = plt.subplots(figsize=(7, 4))
    if train_pts:
        ax.plot(*zip(*train_pts), label="train (batch)", linewidth=0.8, alpha=0.7)
    if val_pts:
        ax.plot(*zip(*val_pts), "o-", label="val")
    ax.set_xlabel("iteration")
    ax.set_ylabel("cross-entropy loss")
    ax.legend()
    ax.grid(alpha=0.3)
    path = Path(out_dir) / "loss.png"
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)
    return path
