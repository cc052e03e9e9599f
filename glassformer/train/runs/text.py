"""A training run from a text file: checks, lock, tokenizer, token file, model, loop, plot.

This is what `glassformer train` calls for an objective that reads TEXT (next-token, mlm): the
objective (train/objectives/) gives the char vocabulary's special tokens, checks the model and
tokenizer before anything is written, and turns each split's token stream into what it draws. With no data file it trains on glassformer's own source
code (the .py files of the installed package), a corpus that is always there and is ours to use.

    run_training     a new run: every setting is checked (types, ranges, a memory estimate)
                     before anything is written, then the run folder is locked and filled
    resume_text_data a resume's token streams (train/runs/resume.py resumes every kind of
                     run that `glassformer train` starts)

--tokenizer (run_training's `tokenizer`): a tokenizer glassformer loads (tokenizers/load.py: a
folder or file, or a name such as gpt2) instead of the default char vocabulary built from the
data. The model's vocab_size is then the tokenizer's padded up to a multiple of VOCAB_MULTIPLE
(nanoGPT's 50,257 -> 50,304; generation never samples the padding ids). The run saves the
tokenizer (run/tokenizer/ and every checkpoint's tokenizer.json) and a resume keeps it: a resume
given another tokenizer is refused.

The run folder records its data file's path, size and sha256 (data.json); a resume refuses a
changed or different file unless allow_new_data. Only one process writes a run folder at a time;
train/runs/folder.py holds the folder's layout.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import Callable

import numpy as np

from glassformer.errors import GlassformerError
from glassformer.io.checkpoint import read_train_log
from glassformer.io.pretrained import load_pretrained
from glassformer.models.registry import family as family_of
from glassformer.tokenizers.bpe import BPETokenizer
from glassformer.tokenizers.byte_lengths import token_byte_lengths, tokens_per_byte
from glassformer.tokenizers.char import CharTokenizer
from glassformer.tokenizers.load import load_tokenizer
from glassformer.train.data import file_fingerprint, prepare_tokens, read_text, split_windows
from glassformer.train.loop import RunState, TrainConfig, check_context, new_run
from glassformer.train.objectives import objective_of
from glassformer.train.objectives.objective import Objective, kind_in_words
from glassformer.train.runs.checks import check_train_config, check_training_memory
from glassformer.train.step import IN_PROCESS, Steps
from glassformer.train.runs.folder import (RunHooks, hold_run_folder, layout_fingerprint,
                                           read_data_record, refuse_existing_run, run_folder,
                                           tokenizer_layout, train_in_folder, write_data_record)

VOCAB_MULTIPLE = 64  # a --tokenizer run's model vocab is padded up to a multiple of this


def default_corpus_text() -> str:
    """The package's own source, concatenated in a fixed order."""
    package = Path(__file__).resolve().parents[2]
    return "".join(f.read_text(encoding="utf-8") for f in sorted(package.rglob("*.py")))


def write_default_corpus(out_dir: Path, text: str) -> Path:
    """Write the default corpus to out_dir/default_corpus.txt (unless it is already there)."""
    path = out_dir / "default_corpus.txt"
    if not path.is_file() or path.read_text(encoding="utf-8") != text:
        path.write_text(text, encoding="utf-8")
    return path


def padded_vocab(vocab_size: int) -> int:
    """A --tokenizer run's model vocab: the tokenizer's, rounded up to VOCAB_MULTIPLE."""
    return -(-vocab_size // VOCAB_MULTIPLE) * VOCAB_MULTIPLE


def objective_data(objective: Objective, data_path: Path, out_dir: Path, tokenizer, layout: dict,
                   block_size: int) -> tuple:
    """(train data, val data, the val split's tokens per UTF-8 byte or None): the text's token
    streams (cached in out_dir/tokens.npy), each prepared by the objective for its draw. Only an
    objective whose loss is a next-token code length reports bits per byte."""
    try:
        tokens = prepare_tokens(data_path, out_dir / "tokens.npy", encode=tokenizer.encode,
                                vocab_size=tokenizer.vocab_size,
                                fingerprint=layout_fingerprint(layout),
                                in_pieces=isinstance(tokenizer, (BPETokenizer, CharTokenizer)))
    except GlassformerError as err:
        if str(err).startswith(("data file", "token file")):
            raise
        raise GlassformerError(f"the run's tokenizer cannot encode {data_path}: {err}") from None
    train_ids, val_ids = split_windows(tokens, block_size, data_path)
    ratio = None
    if objective.bits_per_byte:
        ratio = tokens_per_byte(val_ids, token_byte_lengths(tokenizer))
        ratio = ratio if math.isfinite(ratio) else None
    return (objective.prepare(train_ids, tokenizer), objective.prepare(val_ids, tokenizer),
            ratio)


def _start_from(init: str | None, text: str, model_cfg_for, tokenizer_path: str | None,
                objective: Objective):
    """(model config, params or None, tokenizer) for a new run; the default char vocabulary
    gets the objective's special tokens after its characters."""
    if init is not None and tokenizer_path is not None:
        raise GlassformerError("--init brings its model's own tokenizer; give --init or "
                               "--tokenizer, not both")
    if tokenizer_path is not None:
        tokenizer = load_tokenizer(tokenizer_path)
        return model_cfg_for(padded_vocab(tokenizer.vocab_size)), None, tokenizer
    if init is None:
        tokenizer = CharTokenizer.from_text(text, objective.char_specials)
        return model_cfg_for(tokenizer.vocab_size), None, tokenizer
    model = load_pretrained(init, dequantize=True)     # every weight trains: float32
    if family_of(model.arch).kind != objective.kind:
        raise GlassformerError(f"--init needs {kind_in_words(objective.kind)}, got {model.arch}")
    if model.tokenizer is None:
        raise GlassformerError(f"{init} has no tokenizer, so the data cannot be encoded for it")
    # fresh row-major float32 copies: the same layout a resumed run reads back from its checkpoint
    params = {key: np.ascontiguousarray(value, dtype=np.float32).copy()
              for key, value in model.params.items()}
    return model.cfg, params, model.tokenizer


def run_training(*, data: str | None, out_dir: str, model_cfg_for: Callable[[int], object],
                 train_cfg: TrainConfig, init: str | None = None, tokenizer: str | None = None,
                 after_init: Callable | None = None, on_start=None, on_step=None,
                 should_stop=None, steps: Steps = IN_PROCESS, objective=None
                 ) -> tuple[RunState, object]:
    """Start a new run and train it; returns (final RunState, model config).

    model_cfg_for(vocab_size) builds the model config once the char tokenizer is known.
    init: a glassformer run/checkpoint, a Hugging Face folder or a .gguf file whose weights and
    tokenizer start a new run (fine-tuning).
    tokenizer: a tokenizer folder, file or name (tokenizers/load.py) to train with instead of the
    default char vocabulary (see the module docstring).
    after_init(params, cfg, rng) -> params: a recipe's own init, after the family's
    (train/loop.py new_run; the Tang BERT's neighbour heads).
    on_start(max_iters, start_iter) is called once training is about to begin; on_step(record)
    after each logged record; should_stop() is asked once per iteration (train/runs/signals.py).
    steps: how steps are computed (train/step.py; rank 0 of a data-parallel run passes
    train/distributed.py's). objective: train_cfg.objective's record, as the run's start
    resolved it (None: looked up here).
    """
    hooks = RunHooks(on_start=on_start, on_step=on_step, should_stop=should_stop, steps=steps)
    out = run_folder(out_dir)
    check_train_config(train_cfg)
    objective = objective or objective_of(train_cfg.objective)
    text = read_text(data) if data else default_corpus_text()
    model_cfg, params, tokenizer = _start_from(init, text, model_cfg_for, tokenizer, objective)
    # before anything is written: the model's kind, and what the objective needs of it
    objective.check(family_of(model_cfg.ARCH), model_cfg, tokenizer)
    check_context(model_cfg, train_cfg)
    check_training_memory(model_cfg, train_cfg)
    with hold_run_folder(out):  # note: nothing is written into `out` before this line
        refuse_existing_run(out)
        data_path = Path(data) if data else write_default_corpus(out, text)
        layout = tokenizer_layout(tokenizer, out)
        write_data_record(out, file_fingerprint(data_path))
        train_data, val_data, val_tpb = objective_data(objective, data_path, out, tokenizer,
                                                       layout, train_cfg.block_size)
        run = new_run(model_cfg, train_cfg, params, after_init=after_init)
        run = train_in_folder(out, model_cfg, train_cfg, run, (train_data, val_data), layout,
                              hooks, objective=objective, val_tokens_per_byte=val_tpb)
    return run, model_cfg


def resume_data(out: Path, data: str | None, allow_new_data: bool) -> tuple[dict, str | None]:
    """(fingerprint of the data file to train on, a note when it is not the recorded one)."""
    record = read_data_record(out)
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
    write_data_record(out, now)
    if "sha256" not in record and now["path"] == record["path"]:
        return now, f"recorded the size and sha256 of {path}"
    return now, (f"training on {path} ({now['size']:,} bytes, sha256 {now['sha256'][:12]}) "
                 f"instead of {record['path']} (--allow-new-data)")


def resume_text_data(out: Path, data: str | None, allow_new_data: bool, tokenizer, layout: dict,
                     train_cfg: TrainConfig, objective) -> tuple:
    """A resumed run's (train, val, val tokens per byte, data record, note or None), the data
    prepared for its Objective."""
    record, note = resume_data(out, data, allow_new_data)
    train_data, val_data, val_tpb = objective_data(objective, Path(record["path"]), out,
                                                   tokenizer, layout, train_cfg.block_size)
    return train_data, val_data, val_tpb, record, note


def plot_loss_curve(out_dir: str | Path) -> Path | None:
    """Write out_dir/loss.png from train_log.jsonl; None when matplotlib is not installed.

    A matplotlib Figure, not pyplot: no backend is chosen, so a run started inside Jupyter
    (the course's notebooks) leaves the kernel's inline plots drawing."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        return None
    records = read_train_log(out_dir)
    train_pts = [(r["iter"], r["train_loss"]) for r in records if "train_loss" in r]
    val_pts = [(r["iter"], r["val_loss"]) for r in records if "val_loss" in r]
    fig = Figure(figsize=(7, 4))
    ax = fig.subplots()
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
    return path
