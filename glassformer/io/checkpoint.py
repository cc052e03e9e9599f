"""Training checkpoints: one folder per save, committed by atomically replacing a `latest` file.

A run folder looks like this:

    out/
      latest                      text: the name of the current checkpoint folder
      ckpt-00002000-5f3a9c/       one complete checkpoint
        config.json               the model config (a dict, e.g. dataclasses.asdict(config))
        model.safetensors         params, one tensor per dotted key
        optimizer.safetensors     optimizer moments as m.<key> and v.<key>; step t in the metadata
        state.json                iter, best val loss, RNG states, ... anything to resume exactly
        tokenizer.json            what the tokenizer saved of itself
        manifest.json             byte size and sha256 of each file above, written last
      train_log.jsonl             one JSON object per logged step, appended; never swapped

Why this is safe against kill -9 at any moment: a save writes a NEW folder under a fresh name
(every file fsynced), then replaces `latest` with `os.replace`, the one atomic step (a rename
of a file onto another). Before that rename `latest` names the old, complete folder; after it, the
new one. Only then are the other `ckpt-*` folders deleted; leftovers of a killed save are never
named by `latest` and are deleted by the next save. Loading needs no recovery logic. The log lives
outside the checkpoint folders, so no save can lose it. One process saves into a run folder at a
time.

Loading checks, before returning anything: every file named by the manifest exists and has the
recorded size (else "truncated"), parses (JSON, safetensors), and has the recorded sha256 (else
"edited after saving"); the optimizer has exactly m.<key> and v.<key> for each parameter, with
the parameter's shape. Each error names the file and the problem. No pickle anywhere.

A save that cannot write (a full disk, a read-only folder; issue 32) removes its partial folder
and raises one line naming the run folder, the system's reason and the free space left there;
`latest` still names the last good checkpoint. Partial folders left by a killed process are
removed by the next save, or at once by `remove_partial_checkpoints` (a resume calls it).

The optimizer's state travels as plain data, {"m": {key: array}, "v": {key: array}, "t": int}
(AdamW's moments and step count), so this module needs nothing from train/: train/ turns its
AdamWState into that dict and back.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import shutil
from pathlib import Path
from typing import NamedTuple

import numpy as np
from safetensors import SafetensorError

from glassformer.errors import CheckpointError
from glassformer.io.finite_json import json_line
from glassformer.io.safetensors import (fsync_dir, load_safetensors, read_safetensors_header,
                                        save_safetensors, write_atomically)

LATEST = "latest"
MANIFEST = "manifest.json"
LOG_NAME = "train_log.jsonl"
REQUIRED_FILES = ("config.json", "model.safetensors", "state.json", "tokenizer.json")
OPTIMIZER_FILE = "optimizer.safetensors"  # absent when saved with optimizer=None
CKPT_NAME = re.compile(r"ckpt-[0-9]+-[0-9a-f]+")
MANIFEST_FORMAT = 1
# Bit generators whose state is plain integers, hence JSON-able (MT19937 and Philox hold arrays).
RNG_BIT_GENERATORS = {"PCG64": np.random.PCG64, "PCG64DXSM": np.random.PCG64DXSM,
                      "SFC64": np.random.SFC64}


class Checkpoint(NamedTuple):
    """Everything one save wrote, as loaded and verified."""
    config: dict
    params: dict[str, np.ndarray]     # writable float arrays, keys as saved
    optimizer: dict | None            # {"m": {key: array}, "v": {key: array}, "t": int}, or None
    state: dict
    tokenizer_json: dict
    path: Path                        # the ckpt-* folder that was read


def save_checkpoint(run_dir: str | os.PathLike, *, config: dict, params: dict[str, np.ndarray],
                    optimizer: dict | None, state: dict,
                    tokenizer_json: dict | str | os.PathLike) -> Path:
    """Write a complete checkpoint folder in `run_dir`, make it `latest`, delete older ones.

    `optimizer` is {"m": {key: array}, "v": {key: array}, "t": steps taken}, or None.
    `tokenizer_json` is the tokenizer's JSON as a dict, or the path of a JSON file it wrote.
    Returns the new checkpoint folder.
    """
    run_dir = Path(run_dir)
    tokenizer = _tokenizer_dict(tokenizer_json)
    if optimizer is not None:
        problem = _moment_problem(params, optimizer["m"], optimizer["v"])
        if problem:
            raise CheckpointError(f"cannot save a checkpoint: the optimizer state {problem}")
    step = optimizer["t"] if optimizer is not None else 0
    name = f"ckpt-{step:08d}-{secrets.token_hex(3)}"
    folder = run_dir / name
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
        folder.mkdir()
        _write_folder(folder, config=config, params=params, optimizer=optimizer, state=state,
                      tokenizer=tokenizer)
        write_atomically(run_dir / LATEST, lambda f: f.write(f"{name}\n".encode("ascii")))  # commit
    except (OSError, SafetensorError) as err:
        shutil.rmtree(folder, ignore_errors=True)
        arrays = [params] + ([optimizer["m"], optimizer["v"]] if optimizer is not None else [])
        size = sum(a.nbytes for group in arrays for a in group.values())
        raise CheckpointError(cannot_write(run_dir, f"a checkpoint of {size / 1e6:,.1f} MB",
                                           err)) from None
    _remove_stale(run_dir, keep=name)
    return folder


def _write_folder(folder: Path, *, config: dict, params: dict[str, np.ndarray],
                  optimizer: dict | None, state: dict, tokenizer: dict) -> None:
    """Every file of one checkpoint into the new `folder`, the manifest last, all fsynced."""
    _write_json(folder / "config.json", config)
    _write_json(folder / "state.json", state)
    _write_json(folder / "tokenizer.json", tokenizer)
    save_safetensors(folder / "model.safetensors", params)
    if optimizer is not None:
        moments = {f"m.{key}": m for key, m in optimizer["m"].items()}
        moments.update({f"v.{key}": v for key, v in optimizer["v"].items()})
        save_safetensors(folder / OPTIMIZER_FILE, moments, metadata={"t": str(optimizer["t"])})
    files = REQUIRED_FILES + ((OPTIMIZER_FILE,) if optimizer is not None else ())
    manifest = {"format": MANIFEST_FORMAT, "files": {
        file: {"bytes": (folder / file).stat().st_size, "sha256": _sha256(folder / file)}
        for file in files}}
    _write_json(folder / MANIFEST, manifest)
    fsync_dir(folder)


def cannot_write(run_dir: Path, what: str, err: Exception) -> str:
    """One line for a write that failed: where, the system's reason, the space left there and
    what `latest` still names."""
    reason = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
    # the safetensors package reports "Error while serializing: I/O error: <reason> (os error N)"
    reason = re.sub(r"^.*I/O error: (.*?)(?: \(os error \d+\))?$", r"\1", reason)
    where = run_dir
    while not where.exists() and where != where.parent:
        where = where.parent
    try:
        free = f"{shutil.disk_usage(where).free / 1e6:,.1f} MB free there"
    except OSError:
        free = "free space unknown"
    try:
        kept = f"{LATEST} still names {resolve_checkpoint(run_dir).name}"
    except CheckpointError:
        kept = "no checkpoint was saved before"
    return f"cannot write {what} in {run_dir}: {reason} ({free}); {kept}"


def remove_partial_checkpoints(run_dir: str | os.PathLike) -> None:
    """Delete the ckpt-* folders `latest` does not name (saves a killed process left half done)
    and stray temp files of atomic writes."""
    run_dir = Path(run_dir)
    _remove_stale(run_dir, keep=resolve_checkpoint(run_dir).name)


def load_checkpoint(path: str | os.PathLike) -> Checkpoint:
    """Load and verify the checkpoint named by `path/latest`, or the ckpt-* folder `path`."""
    folder = resolve_checkpoint(path)
    manifest = _read_manifest(folder)
    for file, record in manifest.items():
        _check_size(folder / file, record["bytes"])
    config = _read_json(folder / "config.json")
    state = _read_json(folder / "state.json")
    tokenizer = _read_json(folder / "tokenizer.json")
    params = load_safetensors(folder / "model.safetensors")
    optimizer = _load_optimizer(folder, params) if OPTIMIZER_FILE in manifest else None
    for file, record in manifest.items():
        if _sha256(folder / file) != record["sha256"]:
            raise CheckpointError(f"{folder / file} was modified after it was saved: its sha256 "
                                  f"differs from the one in {MANIFEST}")
    return Checkpoint(config, params, optimizer, state, tokenizer, folder)


def resolve_checkpoint(path: str | os.PathLike) -> Path:
    """The checkpoint folder for `path`: the one `path/latest` names, or `path` itself."""
    path = Path(path)
    if (path / LATEST).is_file():
        name = (path / LATEST).read_text(encoding="utf-8", errors="replace").strip()
        if not CKPT_NAME.fullmatch(name):
            raise CheckpointError(f"{path / LATEST} is corrupt: expected a folder name like "
                                  f"ckpt-00001000-1a2b3c, got {name[:80]!r}")
        if not (path / name).is_dir():
            raise CheckpointError(f"{path / LATEST} names {name}, but {path / name} is missing")
        return path / name
    if (path / MANIFEST).is_file():
        return path
    if not path.is_dir():
        raise CheckpointError(f"checkpoint folder {path} does not exist")
    raise CheckpointError(f"{path} holds no checkpoint: expected a '{LATEST}' file (a run folder)"
                          f" or {MANIFEST} (a checkpoint folder)")


def rng_to_json(rng: np.random.Generator) -> dict:
    """The generator's exact state as a JSON-able dict (PCG64, PCG64DXSM or SFC64)."""
    state = rng.bit_generator.state
    if state["bit_generator"] not in RNG_BIT_GENERATORS:
        raise CheckpointError(f"cannot store a {state['bit_generator']} generator as JSON; use "
                              f"one of {sorted(RNG_BIT_GENERATORS)}, e.g. np.random.default_rng")
    return state


def rng_from_json(state: dict) -> np.random.Generator:
    """A generator that continues exactly where the one given to `rng_to_json` was."""
    name = state.get("bit_generator") if isinstance(state, dict) else None
    if name not in RNG_BIT_GENERATORS:
        raise CheckpointError(f"RNG state names bit generator {name!r}; expected one of "
                              f"{sorted(RNG_BIT_GENERATORS)}")
    bit_generator = RNG_BIT_GENERATORS[name]()
    try:
        bit_generator.state = state
    except (TypeError, ValueError, KeyError) as err:
        raise CheckpointError(f"RNG state for {name} is invalid: {err}") from None
    return np.random.Generator(bit_generator)


def append_train_log(run_dir: str | os.PathLike, record: dict) -> None:
    """Append `record` as one JSON line to run_dir/train_log.jsonl.

    The line goes out in one write() on an O_APPEND file, which a kill -9 cannot split; a line
    torn by a crash of the machine itself is cut off before the next append. It is strict JSON: a
    non-finite number is written as null and named in the line's "nonfinite" (io/finite_json.py).
    """
    path = Path(run_dir) / LOG_NAME
    line = json_line(record)
    Path(run_dir).mkdir(parents=True, exist_ok=True)
    try:
        _cut_torn_tail(path)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode("utf-8"))
        finally:
            os.close(fd)
    except OSError as err:
        raise CheckpointError(cannot_write(Path(run_dir), f"to {LOG_NAME}", err)) from None


def read_train_log(run_dir: str | os.PathLike) -> list[dict]:
    """Every record of run_dir/train_log.jsonl ([] if there is none); a torn last line is skipped."""
    path = Path(run_dir) / LOG_NAME
    if not path.is_file():
        return []
    lines = path.read_bytes().split(b"\n")
    records = []
    for number, line in enumerate(lines[:-1], start=1):  # lines[-1] is b"" or a torn line
        try:
            records.append(json.loads(line))
        except ValueError:
            raise CheckpointError(f"{path} line {number} is not valid JSON") from None
    return records


def trim_train_log(run_dir: str | os.PathLike, *, max_iter: int) -> dict:
    """Drop what a killed run logged past the checkpoint a resume starts from: records with iter >
    max_iter, and the loop's own record at max_iter (its step is done again), which it returns."""
    records = read_train_log(run_dir)
    kept = [r for r in records if not r.get("iter", 0) > max_iter]
    own = [i for i, r in enumerate(kept)
           if r.get("iter") == max_iter and ("train_loss" in r or "val_loss" in r)]
    carried = kept.pop(own[-1]) if own else {}
    if len(kept) < len(records):
        text = "".join(json_line(r) for r in kept)
        write_atomically(Path(run_dir) / LOG_NAME, lambda f: f.write(text.encode("utf-8")))
    return carried


def _load_optimizer(folder: Path, params: dict[str, np.ndarray]) -> dict:
    """{"m", "v", "t"} from optimizer.safetensors, checked key by key against the params."""
    path = folder / OPTIMIZER_FILE
    t_text = read_safetensors_header(path).metadata.get("t", "")
    if not t_text.isdigit():
        raise CheckpointError(f"{path} is corrupt: metadata 't' should be the step count, got "
                              f"{t_text!r}")
    moments = load_safetensors(path)
    m = {key[2:]: a for key, a in moments.items() if key.startswith("m.")}
    v = {key[2:]: a for key, a in moments.items() if key.startswith("v.")}
    stray = sorted(key for key in moments if not key.startswith(("m.", "v.")))
    problem = f"has keys that are neither m.* nor v.*: {stray[:5]}" if stray else (
        _moment_problem(params, m, v))
    if problem:
        raise CheckpointError(f"{path} {problem} (compared with model.safetensors)")
    return {"m": m, "v": v, "t": int(t_text)}


def _moment_problem(params: dict, m: dict, v: dict) -> str:
    """'' if m and v have exactly the params' keys and shapes, else what is wrong."""
    for prefix, moments in (("m", m), ("v", v)):
        missing = sorted(params.keys() - moments.keys())
        extra = sorted(moments.keys() - params.keys())
        if missing:
            return f"is missing key {prefix}.{missing[0]} ({len(missing)} missing in all)"
        if extra:
            return f"has extra key {prefix}.{extra[0]} ({len(extra)} extra in all)"
        for key, p in params.items():
            if moments[key].shape != p.shape:
                return (f"has {prefix}.{key} of shape {moments[key].shape}, but parameter "
                        f"{key} has shape {p.shape}")
    return ""


def _read_manifest(folder: Path) -> dict[str, dict]:
    """manifest.json's {file: {"bytes", "sha256"}}, checked for the expected set of files."""
    manifest = _read_json(folder / MANIFEST)
    files = manifest.get("files")
    valid = manifest.get("format") == MANIFEST_FORMAT and isinstance(files, dict) and all(
        isinstance(r, dict) and isinstance(r.get("bytes"), int) and isinstance(r.get("sha256"), str)
        for r in files.values())
    if not valid:
        raise CheckpointError(f"{folder / MANIFEST} is corrupt: expected format "
                              f"{MANIFEST_FORMAT} and a 'files' table of bytes and sha256")
    expected = set(REQUIRED_FILES) | ({OPTIMIZER_FILE} & files.keys())
    if files.keys() != expected:
        raise CheckpointError(f"{folder / MANIFEST} lists files {sorted(files)}; expected "
                              f"{sorted(expected)}")
    return files


def _check_size(path: Path, recorded: int) -> None:
    """The file exists and has the size the manifest recorded."""
    if not path.is_file():
        raise CheckpointError(f"checkpoint file {path} is missing")
    size = path.stat().st_size
    if size == recorded:
        return
    sizes = f"{MANIFEST} recorded {recorded} bytes, the file has {size}"
    if size < recorded and path.suffix == ".json":
        _read_json(path)  # a cut-off JSON file fails here, naming the JSON error
    if size < recorded and path.suffix != ".json":
        raise CheckpointError(f"{path} is truncated: {sizes}")
    raise CheckpointError(f"{path} was modified after it was saved: {sizes}")


def _read_json(path: Path) -> dict:
    """A JSON object from `path`, with errors naming the file."""
    if not path.is_file():
        raise CheckpointError(f"checkpoint file {path} is missing")
    try:
        value = json.loads(path.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as err:
        raise CheckpointError(f"{path} is truncated or corrupt: not valid JSON ({err})") from None
    if not isinstance(value, dict):
        raise CheckpointError(f"{path} should hold a JSON object, got {type(value).__name__}")
    return value


def _write_json(path: Path, value: dict) -> None:
    """Write a JSON object atomically; NumPy scalars become Python numbers."""
    try:
        text = json.dumps(value, indent=1, default=_json_scalar, ensure_ascii=False)
    except (TypeError, ValueError) as err:
        raise CheckpointError(f"cannot write {path.name}: {err}") from None
    data = text.encode("utf-8")
    write_atomically(path, lambda f: f.write(data))


def _json_scalar(value):
    """json.dumps `default`: NumPy scalars as Python numbers; anything else is an error."""
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"a value of type {type(value).__name__} is not JSON-serialisable")


def _tokenizer_dict(tokenizer_json: dict | str | os.PathLike) -> dict:
    """The tokenizer's JSON object, given directly or as the path of a file holding it."""
    if isinstance(tokenizer_json, dict):
        return tokenizer_json
    return _read_json(Path(tokenizer_json))


def _sha256(path: Path) -> str:
    """Hex SHA-256 of a file, read in 1 MiB chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _remove_stale(run_dir: Path, *, keep: str) -> None:
    """Delete every ckpt-* folder but `keep`, and temp files of killed atomic writes."""
    for entry in run_dir.iterdir():
        if entry.name.startswith("ckpt-") and entry.name != keep and entry.is_dir():
            shutil.rmtree(entry, ignore_errors=True)
        elif entry.name.startswith((f".{LATEST}.tmp-", f".{LOG_NAME}.tmp-")):
            entry.unlink(missing_ok=True)


def _cut_torn_tail(path: Path) -> None:
    """If the log does not end in a newline (a machine crash mid-line), cut the partial line."""
    if not path.is_file() or path.stat().st_size == 0:
        return
    with open(path, "r+b") as f:
        f.seek(-1, os.SEEK_END)
        if f.read(1) == b"\n":
            return  # the usual case: only the last byte is read
        f.seek(0)
        data = f.read()
        f.truncate(data.rfind(b"\n") + 1)
