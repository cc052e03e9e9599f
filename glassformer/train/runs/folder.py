"""A run folder's layout, in one place: its lock, its data record, its tokenizer, its checkpoints.

    RUN/lock                the pid of the one writer (a note: the lock is on RUN itself,
                            runs/lock.py)
    RUN/data.json           what the run trains on (DATA_RECORD): a text file's path, size and
                            sha256, or a pair set's name, count and sha256 (runs/pairs.py)
    RUN/tokenizer/          the run's tokenizer (tokenizer_layout); every checkpoint also holds
                            it as tokenizer.json
    RUN/latest, RUN/ckpt-*/ the training loop's checkpoints (train/loop.py, io/checkpoint.py);
                            saved_train_config reads the latest one's settings
    RUN/train_log.jsonl     one record per iteration (and per resume that changed something);
                            a record dataset's run first logs its held-out split (log_held_out)

The three kinds of run (runs/text.py, runs/pairs.py, runs/finetune.py) fill it through these
helpers, and end the same way: `train_in_folder` starts the loop with the run's hooks.

One writer per run folder (runs/lock.py): every process that writes a run (a new run, a resume,
a fine-tune) holds an OS lock on the folder itself while it runs:

    with hold_run_folder(out):      # the second process gets a GlassformerError at once,
        ...train, save...           # naming the pid that holds the folder

Readers (generate, eval, a loading library call) take no lock; they see whole checkpoints because
a save only ever renames a complete folder into `latest`.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from pathlib import Path
from typing import Callable, Iterator, NamedTuple

from glassformer.errors import GlassformerError
from glassformer.io.checkpoint import (append_train_log, remove_partial_checkpoints,
                                       resolve_checkpoint)
from glassformer.io.safetensors import write_atomically
from glassformer.tokenizers.load import load_tokenizer
from glassformer.train.loop import RunState, TrainConfig, train
from glassformer.train.runs.checks import train_config_from_dict
from glassformer.train.runs.lock import LOCK_NAME, lock_folder
from glassformer.train.step import IN_PROCESS, Steps

DATA_RECORD = "data.json"               # what the run trains on (see the module docstring)
LEGACY_DATA_RECORD = "data_source.txt"  # older runs: the data path alone


@contextlib.contextmanager
def hold_run_folder(run_dir: str | os.PathLike) -> Iterator[Path]:
    """Create `run_dir` if needed and hold its lock for the duration of the `with` block.

    Raises GlassformerError naming the holder's pid when another process holds it. Once it holds
    the lock, it writes its pid into `RUN/lock` and removes what a killed writer left half done
    (checkpoint folders `latest` does not name: `remove_partial_checkpoints`), so a resume on a
    full disk starts with that space.
    """
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    fd = lock_folder(run_dir)
    try:
        try:
            (run_dir / LOCK_NAME).write_text(f"{os.getpid()}\n", encoding="ascii")
        except OSError:
            pass  # only a note (the module docstring); a full disk is said by the first save
        if (run_dir / "latest").is_file():
            _remove_partial(run_dir)
        yield run_dir
    finally:
        os.close(fd)  # releases the lock


def _remove_partial(run_dir: Path) -> None:
    """remove_partial_checkpoints, unless `latest` is unreadable (loading the run then says
    what is wrong, and nothing is deleted on a guess)."""
    try:
        remove_partial_checkpoints(run_dir)
    except GlassformerError:
        return


def run_folder(out_dir: str | os.PathLike) -> Path:
    """--out as a Path; an empty name is refused."""
    if not str(out_dir).strip():
        raise GlassformerError("--out must name a run folder, got an empty string")
    return Path(out_dir)


def refuse_existing_run(out: Path) -> None:
    """A new run never writes over a run folder that has checkpoints."""
    if (out / "latest").exists():
        raise GlassformerError(f"{out} already holds a run; pass --resume to continue it or "
                               "choose another --out")


def write_data_record(out: Path, record: dict) -> None:
    text = json.dumps(record, indent=1).encode("utf-8")
    write_atomically(out / DATA_RECORD, lambda f: f.write(text))


def read_data_record(out: Path) -> dict:
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


def tokenizer_layout(tokenizer, out_dir: Path) -> dict:
    """Save the tokenizer in out_dir/tokenizer/; its JSON (what a checkpoint stores as
    tokenizer.json)."""
    folder = out_dir / "tokenizer"
    path = tokenizer.save(folder)
    if path.name != "tokenizer.json":
        path = folder / "tokenizer.json"
    if not path.is_file():
        raise GlassformerError(f"the {type(tokenizer).__name__} cannot be stored as "
                               "tokenizer.json, so it cannot go into a checkpoint")
    return json.loads(path.read_text(encoding="utf-8"))


def layout_fingerprint(tokenizer_layout: dict) -> str:
    """16 hex digits of the tokenizer's JSON: what tells two tokenizers apart."""
    raw = json.dumps(tokenizer_layout, sort_keys=True, ensure_ascii=False).encode("utf-8")
    return hashlib.sha256(raw).hexdigest()[:16]


def check_same_tokenizer(out: Path, saved_layout: dict, tokenizer_path: str) -> None:
    """Refuse a resume given a tokenizer that is not the run's own (compared by their JSON)."""
    given = load_tokenizer(tokenizer_path)
    with tempfile.TemporaryDirectory() as folder:
        layout = tokenizer_layout(given, Path(folder))
    if layout_fingerprint(layout) != layout_fingerprint(saved_layout):
        raise GlassformerError(
            f"--resume keeps the run's tokenizer: the run in {out} was trained with tokenizer "
            f"{layout_fingerprint(saved_layout)}, got --tokenizer {tokenizer_path} "
            f"({layout_fingerprint(layout)}, {given.vocab_size:,} ids); drop --tokenizer, or "
            "start a new run with another --out")


def saved_train_config(out_dir: str | os.PathLike) -> TrainConfig:
    """The training settings the run in `out_dir` was last saved with, read from its latest
    state.json alone (no tensors, no verification: a resume verifies everything). For a
    launcher that must know them before training, e.g. how many processes a resume runs on."""
    folder = resolve_checkpoint(out_dir)
    try:
        state = json.loads((folder / "state.json").read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise GlassformerError(f"{folder / 'state.json'} is not valid JSON") from None
    return train_config_from_dict(state.get("train_config", {}))


class RunHooks(NamedTuple):
    """What the caller of a run gives the loop (train/loop.py's train)."""
    on_note: Callable | None = None      # on_note(line): what a resume changed, notices
    on_start: Callable | None = None     # on_start(max_iters, start_iter), once
    on_step: Callable | None = None      # on_step(record), after each logged record
    should_stop: Callable | None = None  # asked once per iteration (train/runs/signals.py)
    steps: Steps = IN_PROCESS            # how steps are computed (train/step.py)


def announce_resume(hooks: RunHooks, out: Path, it: int, saved: TrainConfig, changed: dict,
                    data_note: str | None) -> None:
    """Tell the caller where a resume starts and what it changed."""
    if not hooks.on_note:
        return
    hooks.on_note(f"resuming {out} at iteration {it} of {saved.max_iters}")
    for name, (old, new) in changed.items():
        hooks.on_note(f"--{name.replace('_', '-')} {new} (the run had {old})")
    if data_note:
        hooks.on_note(data_note)


def log_held_out(out: Path, line: str, on_note=None) -> None:
    """A new run's held-out split, once: the train log's first entry, and a note."""
    append_train_log(out, {"iter": 0, "held_out": line})
    if on_note:
        on_note(line)


def train_in_folder(out: Path, model_cfg, train_cfg: TrainConfig, run: RunState, data: tuple,
                    layout: dict, hooks: RunHooks, *, objective, on_step=None,
                    frozen: dict | None = None,
                    val_tokens_per_byte: float | None = None) -> RunState:
    """The end of every kind of run: say it starts, then the loop (train/loop.py) on the
    (train, val) data, with the run's Objective as its start resolved it. on_step: instead of
    hooks.on_step (a fine-tune wraps it)."""
    train_data, val_data = data
    if hooks.on_start:
        hooks.on_start(train_cfg.max_iters, run.it)
    return train(model_cfg, train_cfg, run, train_data=train_data, val_data=val_data,
                 out_dir=out, tokenizer_json=layout, on_step=on_step or hooks.on_step,
                 should_stop=hooks.should_stop, steps=hooks.steps,
                 val_tokens_per_byte=val_tokens_per_byte, frozen=frozen, objective=objective)
