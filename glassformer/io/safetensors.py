"""Read and write safetensors files through the `safetensors` package's NumPy API: no pickle, no torch.

The package, the format's reference implementation, parses and validates every header (header
length, JSON, dtypes, shapes, byte ranges that tile the data with no overlap, gap or tail) and
reads and writes the tensors. The format itself, byte by byte, is described in docs/safetensors.md.

This module keeps what glassformer's own reader gave its users:

  * one-line `CheckpointError`s naming the file, and the tensor and problem where known (the
    package's errors name neither the file nor, mostly, the tensor);
  * checks the package leaves out: a tensor name repeated in the header (the package silently
    keeps one of them), BOOL bytes other than 0 and 1, dtypes NumPy cannot hold, and a PyTorch
    pickle or zip passed off as safetensors (the package reports only "header too large");
  * BF16 and F16 tensors widened to float32 by the one helper `widen_to_float32`. note: NumPy has
    no bfloat16, so the package's NumPy API cannot return BF16 tensors (`get_tensor` raises
    TypeError); their raw bytes are read here, at the offset of the header the package has just
    validated, as uint16 bit patterns;
  * writable arrays that never write back to the file, and atomic saves.

Memory: reads use the package's `pread` backend, which reads each tensor straight into its own
array (one copy of the data, no second one). Its default `mmap` backend keeps the mapped pages
resident beside the copies, twice the file at the peak. Unlike a copy-on-write memory map, the
data is read at load time; once a model has run over all its weights, the peak is the same.
Figures: docs/safetensors.md.

`write_atomically` (temp file beside the target, fsync, `os.replace`) is the one atomic-write
helper of the package; checkpoint.py and train/data.py use it too.
"""
from __future__ import annotations

import json
import math
import os
import secrets
from pathlib import Path
from typing import BinaryIO, Callable, NamedTuple

import numpy as np
import safetensors.numpy
from safetensors import SafetensorError, safe_open

from glassformer.errors import CheckpointError

# Safetensors dtype name -> NumPy dtype glassformer reads it as (BF16 as raw uint16 bits).
FILE_DTYPES: dict[str, np.dtype] = {
    "F64": np.dtype("<f8"), "F32": np.dtype("<f4"), "F16": np.dtype("<f2"),
    "BF16": np.dtype("<u2"), "I64": np.dtype("<i8"), "I32": np.dtype("<i4"),
    "I16": np.dtype("<i2"), "I8": np.dtype("i1"), "U64": np.dtype("<u8"),
    "U32": np.dtype("<u4"), "U16": np.dtype("<u2"), "U8": np.dtype("u1"), "BOOL": np.dtype("?"),
}
# NumPy dtypes glassformer saves: the ones it reads back (bfloat16 has no NumPy dtype).
SAVE_DTYPES = frozenset(dt for name, dt in FILE_DTYPES.items() if name != "BF16")
MAX_HEADER_BYTES = 100_000_000  # the safetensors package's own limit on the header length
PICKLE_STARTS = (b"\x80\x02", b"\x80\x03", b"\x80\x04", b"\x80\x05")  # PROTO opcode + version
PACKAGE_PREFIX = "Error while deserializing header: "  # how the package starts its messages


class TensorInfo(NamedTuple):
    """One header entry: dtype name as in the file, shape."""
    dtype: str
    shape: tuple[int, ...]


class SafetensorsHeader(NamedTuple):
    """A validated header: tensors by name (in data order) and the text metadata."""
    tensors: dict[str, TensorInfo]
    metadata: dict[str, str]


def read_safetensors_header(path: str | os.PathLike) -> SafetensorsHeader:
    """Parse and validate the header of `path` without reading any tensor data."""
    path = Path(path)
    with _open(path) as f:
        header, _ = _header(path, f)
    return header


def load_safetensors(path: str | os.PathLike, names=None) -> dict[str, np.ndarray]:
    """The tensors of `path` as writable NumPy arrays, in data order; BF16 and F16 widened to
    float32. The arrays are the process's own memory: writing to them never reaches the file.

    names: read only these tensors (default: all); the others' bytes are never read.
    """
    path = Path(path)
    arrays = {}
    with _open(path) as f:
        header, starts = _header(path, f)
        wanted = header.tensors.keys() if names is None else set(names)
        missing = sorted(wanted - header.tensors.keys())
        if missing:
            raise CheckpointError(f"{path} has no tensor {missing[0]!r}")
        for name, info in header.tensors.items():
            if name in wanted:
                arrays[name] = _read_tensor(path, f, name, info, starts[name])
    return arrays


def widen_to_float32(raw: np.ndarray, dtype: str) -> np.ndarray:
    """Widen a half-precision tensor to float32, exactly: every BF16 and F16 value is a float32.

    `raw` holds the bytes as read: uint16 bit patterns for "BF16", float16 values for "F16".
    bf16 keeps float32's sign, 8 exponent bits and top 7 mantissa bits, so its 16 bits shifted
    left by 16 are the float32 with the same value (NaN and inf included).
    """
    if dtype == "F16":
        return raw.astype(np.float32)
    if dtype == "BF16":
        bits = raw.astype(np.uint32)         # (...) uint16 -> (...) uint32, zero-extended
        bits <<= 16                          # bf16 bits become the top half of a float32
        return bits.view(np.float32)
    raise CheckpointError(f"widen_to_float32 takes dtype 'BF16' or 'F16', got {dtype!r}")


def save_safetensors(path: str | os.PathLike, tensors: dict[str, np.ndarray],
                     metadata: dict[str, str] | None = None) -> None:
    """Write `tensors` to `path` atomically, with the package's writer.

    note: the package's NumPy writer copies each array's memory as it lies, so a transposed or
    sliced view would be saved scrambled; every array goes in as a C-contiguous little-endian
    array (a copy only for those that are not already).
    """
    path = Path(path)
    for key in tensors:
        if not isinstance(key, str) or not key or key == "__metadata__":
            raise CheckpointError(f"cannot save tensor named {key!r} to {path}")
    if metadata is not None and not all(
            isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
        raise CheckpointError(f"metadata for {path} must map str to str, got {metadata!r}")
    arrays = {name: _contiguous(path, name, array) for name, array in tensors.items()}
    write_file_atomically(
        path, lambda tmp: safetensors.numpy.save_file(arrays, tmp, metadata=metadata))


def write_atomically(path: str | os.PathLike, write: Callable[[BinaryIO], None]) -> None:
    """Call write(f) on a temp file beside `path`, fsync it, then os.replace it onto `path`.

    A reader (or a run killed at any moment) sees either the old file or the complete new one.
    """
    def write_new_file(tmp: Path) -> None:
        with open(tmp, "wb") as f:  # the empty file write_file_atomically created for us
            write(f)

    write_file_atomically(path, write_new_file)


def write_file_atomically(path: str | os.PathLike, write_to: Callable[[Path], None]) -> None:
    """Call write_to(tmp) for a fresh temp path beside `path`, fsync it, os.replace it onto `path`
    (for writers that take a file name, like the safetensors package's)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{secrets.token_hex(4)}")
    try:
        with open(tmp, "xb"):  # claims the name, with the permissions the umask gives new files
            pass
        mode = tmp.stat().st_mode & 0o777
        write_to(tmp)
        # note: the safetensors package leaves its files readable by their owner only (0600);
        # ours get the permissions of any other file the user writes
        os.chmod(tmp, mode)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def fsync_dir(path: str | os.PathLike) -> None:
    """Flush a directory's entries (renames, new files) to disk; a no-op where unsupported."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some platforms and file systems cannot fsync a directory
    finally:
        os.close(fd)


def _open(path: Path):
    """The package's reader over `path` (header validated), or one CheckpointError line."""
    if path.is_dir():
        raise CheckpointError(f"{path} is a directory, expected a .safetensors file")
    if not path.is_file():
        raise CheckpointError(f"{path}: no such file")
    try:
        return safe_open(path, framework="np", backend="pread")
    except SafetensorError as err:
        raise CheckpointError(_describe(path, str(err))) from None


def _describe(path: Path, message: str) -> str:
    """The package's complaint about `path` as one line that names the file and the problem."""
    problem = message.removeprefix(PACKAGE_PREFIX)
    if problem in ("header too large", "header too small", "invalid header length"):
        with open(path, "rb") as f:
            prefix = f.read(8)
        size = path.stat().st_size
        header_len = int.from_bytes(prefix, "little")
        # note: only an impossible length means "not safetensors": a real N = 384 starts 0x80.
        if prefix.startswith(b"PK\x03\x04") or prefix[:2] in PICKLE_STARTS:
            return (f"{path} is a PyTorch pickle/zip checkpoint, not safetensors; glassformer "
                    "never unpickles files. Convert it to safetensors first (for instance with "
                    "safetensors.torch.save_file in a trusted environment)")
        if len(prefix) < 8:
            return (f"{path} is truncated: a safetensors file starts with an 8-byte header "
                    f"length, but the file has {size} bytes")
        if header_len > MAX_HEADER_BYTES:
            return (f"{path} is not a safetensors file: its header length {header_len} exceeds "
                    f"{MAX_HEADER_BYTES} bytes")
        return (f"{path} is truncated: the header needs bytes 8..{8 + header_len} but the file "
                f"has {size} bytes")
    if problem == "incomplete metadata, file not fully covered":
        return (f"{path} is truncated or corrupt: its tensors do not cover its data bytes "
                f"exactly ({problem})")
    return f"{path} is corrupt: {problem}"


def _header(path: Path, f) -> tuple[SafetensorsHeader, dict[str, int]]:
    """The validated header of the open file `f`, and each tensor's first byte in the file.

    The package has validated the header when this runs; the JSON is read again here only for
    what the package does not tell: repeated names, and where each tensor starts (for BF16).
    """
    with open(path, "rb") as raw:
        header_len = int.from_bytes(raw.read(8), "little")
        header_bytes = raw.read(header_len)
    try:
        entries = json.loads(header_bytes, object_pairs_hook=_no_duplicates)
    except ValueError as err:
        raise CheckpointError(f"{path} is corrupt: {err}") from None
    tensors, starts = {}, {}
    for name in f.offset_keys():
        view = f.get_slice(name)
        dtype = view.get_dtype()
        if dtype not in FILE_DTYPES:
            raise CheckpointError(f"{path}: tensor {name!r} has dtype {dtype!r}, which glassformer "
                                  f"cannot read (supported: {', '.join(FILE_DTYPES)})")
        tensors[name] = TensorInfo(dtype, tuple(view.get_shape()))
        starts[name] = 8 + header_len + entries[name]["data_offsets"][0]
    return SafetensorsHeader(tensors, f.metadata() or {}), starts


def _read_tensor(path: Path, f, name: str, info: TensorInfo, start: int) -> np.ndarray:
    """One tensor through the package's reader, or, for BF16, from its raw bits at `start`."""
    if info.dtype == "BF16":
        count = math.prod(info.shape)
        bits = np.fromfile(path, dtype=FILE_DTYPES["BF16"], count=count, offset=start)
        return widen_to_float32(bits.reshape(info.shape), "BF16")
    array = f.get_tensor(name)
    if info.dtype == "BOOL" and array.view(np.uint8).max(initial=0) > 1:
        raise CheckpointError(f"{path} is corrupt: BOOL tensor {name!r} holds bytes other "
                              "than 0 and 1")
    if info.dtype == "F16":
        return widen_to_float32(array, "F16")
    return array


def _contiguous(path: Path, name: str, array) -> np.ndarray:
    """`array` as the C-contiguous little-endian array the package writes; an error for what
    glassformer would not read back."""
    if not isinstance(array, np.ndarray):
        raise CheckpointError(f"cannot save {name!r} to {path}: expected a NumPy array, got "
                              f"{type(array).__name__}")
    dtype = array.dtype.newbyteorder("<")  # a big-endian array is byte-swapped when written
    if dtype not in SAVE_DTYPES:
        raise CheckpointError(f"cannot save {name!r} to {path}: dtype {array.dtype} is not one "
                              "glassformer reads back from safetensors")
    return array.astype(dtype, order="C", copy=False)  # the array itself when it already is


def _no_duplicates(pairs: list[tuple[str, object]]) -> dict:
    """json object_pairs_hook: a repeated key is corruption, not 'last one wins'."""
    result = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"duplicate key {key!r} in its header")
        result[key] = value
    return result
