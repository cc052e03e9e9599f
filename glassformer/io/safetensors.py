"""Read and write safetensors files with NumPy alone: no pickle, no torch.

The format (https://github.com/huggingface/safetensors), byte by byte:

    [0, 8)          N, the header length, an unsigned 64-bit little-endian integer
    [8, 8 + N)      a UTF-8 JSON object: {"name": {"dtype": "F32", "shape": [768, 2304],
                    "data_offsets": [begin, end]}, ..., "__metadata__": {"key": "text"}}
    [8 + N, EOF)    the data: each tensor's row-major little-endian bytes at [begin, end),
                    offsets counted from the start of the data; the tensors tile it exactly

The reader checks every offset against the file size before touching data, so a truncated or
corrupt file fails with a `CheckpointError` naming the file, the tensor and the problem. It is as
strict as the `safetensors` package: overlaps, gaps and trailing bytes are all errors.

Data is memory-mapped copy-on-write (`mmap.ACCESS_COPY`): loading a 500 MB file does not read it
all up front nor hold a second copy, the arrays are writable (a training run may update them in
place) and writes never reach the file. `BF16` and `F16` tensors are widened to float32 by the one
helper `widen_to_float32` (NumPy has no bfloat16; bf16 is the top half of a float32's bits).

`write_atomically` (temp file beside the target, fsync, `os.replace`) is the one atomic-write
helper of the package; checkpoint.py and train/data.py use it too.
"""
from __future__ import annotations

import json
import math
import mmap
import os
import secrets
from pathlib import Path
from typing import BinaryIO, Callable, NamedTuple

import numpy as np

from glassformer.errors import CheckpointError

# Safetensors dtype name -> NumPy dtype of the bytes on disk (BF16 is read as raw uint16 bits).
FILE_DTYPES: dict[str, np.dtype] = {
    "F64": np.dtype("<f8"), "F32": np.dtype("<f4"), "F16": np.dtype("<f2"),
    "BF16": np.dtype("<u2"), "I64": np.dtype("<i8"), "I32": np.dtype("<i4"),
    "I16": np.dtype("<i2"), "I8": np.dtype("i1"), "U64": np.dtype("<u8"),
    "U32": np.dtype("<u4"), "U16": np.dtype("<u2"), "U8": np.dtype("u1"), "BOOL": np.dtype("?"),
}
# NumPy dtype -> safetensors name, for writing (bfloat16 has no NumPy dtype, so no BF16 here).
SAVE_NAMES: dict[np.dtype, str] = {
    np.dtype(dt).newbyteorder("<"): name for name, dt in FILE_DTYPES.items() if name != "BF16"}
MAX_HEADER_BYTES = 100_000_000  # the safetensors package's own limit on N
PICKLE_STARTS = (b"\x80\x02", b"\x80\x03", b"\x80\x04", b"\x80\x05")  # PROTO opcode + version


class TensorInfo(NamedTuple):
    """One header entry: dtype name as in the file, shape, and byte range within the data."""
    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int


class SafetensorsHeader(NamedTuple):
    """A parsed, validated header: tensors by name (file order), metadata, where data starts."""
    tensors: dict[str, TensorInfo]
    metadata: dict[str, str]
    data_start: int   # 8 + N: the byte offset of the data in the file
    data_size: int    # bytes after the header


def read_safetensors_header(path: str | os.PathLike) -> SafetensorsHeader:
    """Parse and validate the header of `path` without reading any tensor data."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            prefix = f.read(8)
            file_size = os.fstat(f.fileno()).st_size
            header_len = _header_length(path, prefix, file_size)
            header_bytes = f.read(header_len)
    except FileNotFoundError:
        raise CheckpointError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise CheckpointError(f"{path} is a directory, expected a .safetensors file") from None
    data_start = 8 + header_len
    tensors, metadata = _parse_header(path, header_bytes)
    _check_offsets(path, tensors, file_size - data_start)
    return SafetensorsHeader(tensors, metadata, data_start, file_size - data_start)


def load_safetensors(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """All tensors of `path` as NumPy arrays, in file order; BF16 and F16 widened to float32.

    Arrays of other dtypes are writable copy-on-write views of a memory map of the file.
    """
    path = Path(path)
    header = read_safetensors_header(path)
    with open(path, "rb") as f:
        # note: mmap cannot map an empty range; a valid header makes the file non-empty.
        data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
    arrays = {}
    for name, info in header.tensors.items():
        file_dtype = FILE_DTYPES[info.dtype]
        count = (info.end - info.begin) // file_dtype.itemsize
        raw = np.frombuffer(data, dtype=file_dtype, count=count,
                            offset=header.data_start + info.begin).reshape(info.shape)
        if info.dtype == "BOOL" and raw.view(np.uint8).max(initial=0) > 1:
            raise CheckpointError(f"{path} is corrupt: BOOL tensor {name!r} holds bytes other "
                                  "than 0 and 1")
        arrays[name] = widen_to_float32(raw, info.dtype) if info.dtype in ("BF16", "F16") else raw
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
    """Write `tensors` to `path` atomically, in a file the `safetensors` package reads.

    Tensors are laid out widest dtype first, then by name, as the package does, so every tensor
    starts at an offset aligned to its item size.
    """
    for key in tensors:
        if not isinstance(key, str) or not key or key == "__metadata__":
            raise CheckpointError(f"cannot save tensor named {key!r} to {path}")
    if metadata is not None and not all(
            isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
        raise CheckpointError(f"metadata for {path} must map str to str, got {metadata!r}")
    dtypes = {name: _save_dtype(path, name, array) for name, array in tensors.items()}
    order = sorted(tensors, key=lambda name: (-dtypes[name].itemsize, name))
    entries, offset = {}, 0
    if metadata is not None:
        entries["__metadata__"] = dict(metadata)
    for name in order:
        nbytes = tensors[name].size * dtypes[name].itemsize
        entries[name] = {"dtype": SAVE_NAMES[dtypes[name]], "shape": list(tensors[name].shape),
                         "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    header = json.dumps(entries, separators=(",", ":")).encode("utf-8")
    header += b" " * (-len(header) % 8)  # pad with spaces so the data starts 8-byte aligned

    def write(f: BinaryIO) -> None:
        f.write(len(header).to_bytes(8, "little"))
        f.write(header)
        for name in order:
            # note: ascontiguousarray may make a 0-d array 1-d; the bytes are the same.
            f.write(np.ascontiguousarray(tensors[name], dtype=dtypes[name]).data)

    write_atomically(path, write)


def write_atomically(path: str | os.PathLike, write: Callable[[BinaryIO], None]) -> None:
    """Call write(f) on a temp file beside `path`, fsync it, then os.replace it onto `path`.

    A reader (or a run killed at any moment) sees either the old file or the complete new one.
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{secrets.token_hex(4)}")
    try:
        with open(tmp, "xb") as f:
            write(f)
            f.flush()
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


def _header_length(path: Path, prefix: bytes, file_size: int) -> int:
    """N from the first 8 bytes, checked against the file size and the 100 MB limit."""
    header_len = int.from_bytes(prefix, "little")
    valid = len(prefix) == 8 and header_len <= MAX_HEADER_BYTES and 8 + header_len <= file_size
    # note: only an impossible N means "not safetensors": a real N = 384 also starts with 0x80.
    if not valid and (prefix.startswith(b"PK\x03\x04") or prefix[:2] in PICKLE_STARTS):
        raise CheckpointError(
            f"{path} is a PyTorch pickle/zip checkpoint, not safetensors; glassformer never "
            "unpickles files. Convert it to safetensors first (for instance with "
            "safetensors.torch.save_file in a trusted environment)")
    if len(prefix) < 8:
        raise CheckpointError(
            f"{path} is truncated: a safetensors file starts with an 8-byte header length, "
            f"but the file has {file_size} bytes")
    if header_len > MAX_HEADER_BYTES:
        raise CheckpointError(
            f"{path} is not a safetensors file: its header length {header_len} exceeds "
            f"{MAX_HEADER_BYTES} bytes")
    if 8 + header_len > file_size:
        raise CheckpointError(
            f"{path} is truncated: the header needs bytes 8..{8 + header_len} but the file has "
            f"{file_size} bytes")
    return header_len


def _parse_header(path: Path, header_bytes: bytes) -> tuple[dict[str, TensorInfo], dict]:
    """JSON header -> (tensors, metadata), checking each entry's fields, dtype and byte count."""
    try:
        header = json.loads(header_bytes.decode("utf-8"), object_pairs_hook=_no_duplicates)
    except (UnicodeDecodeError, ValueError) as err:
        raise CheckpointError(f"{path} is corrupt: its header is not valid JSON ({err})") from None
    if not isinstance(header, dict):
        raise CheckpointError(f"{path} is corrupt: its header is not a JSON object")
    metadata = header.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict) or not all(
            isinstance(value, str) for value in metadata.values()):
        raise CheckpointError(f"{path} is corrupt: __metadata__ must map strings to strings")
    tensors = {}
    for name, entry in header.items():
        tensors[name] = _tensor_info(path, name, entry)
    return tensors, metadata


def _tensor_info(path: Path, name: str, entry) -> TensorInfo:
    """Validate one header entry: known dtype, shape of ints >= 0, offsets matching the size."""
    if not isinstance(entry, dict) or set(entry) != {"dtype", "shape", "data_offsets"}:
        raise CheckpointError(f"{path} is corrupt: header entry for {name!r} must have exactly "
                              f"dtype, shape and data_offsets, got {entry!r}")
    dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
    if dtype not in FILE_DTYPES:
        raise CheckpointError(f"{path}: tensor {name!r} has dtype {dtype!r}, which glassformer "
                              f"cannot read (supported: {', '.join(FILE_DTYPES)})")
    if not _is_int_list(shape) or not _is_int_list(offsets) or len(offsets) != 2:
        raise CheckpointError(f"{path} is corrupt: tensor {name!r} has shape {shape!r} and "
                              f"data_offsets {offsets!r}; expected lists of integers >= 0")
    begin, end = offsets
    expected = math.prod(shape) * FILE_DTYPES[dtype].itemsize
    if end - begin != expected:
        raise CheckpointError(
            f"{path} is corrupt: tensor {name!r} of dtype {dtype} and shape {tuple(shape)} "
            f"needs {expected} bytes but its data_offsets [{begin}, {end}] span {end - begin}")
    return TensorInfo(dtype, tuple(shape), begin, end)


def _check_offsets(path: Path, tensors: dict[str, TensorInfo], data_size: int) -> None:
    """The tensors' byte ranges lie inside the data and tile it: no overlap, gap or tail."""
    by_offset = sorted(tensors.items(), key=lambda item: (item[1].begin, item[1].end))
    for name, info in by_offset:
        if info.end > data_size:
            raise CheckpointError(
                f"{path} is truncated: tensor {name!r} needs bytes {info.begin}..{info.end} but "
                f"the file has {data_size} data bytes")
    covered = 0
    for name, info in by_offset:
        if info.begin != covered:
            problem = "overlaps the tensor before it" if info.begin < covered else (
                f"leaves a gap of {info.begin - covered} bytes before it")
            raise CheckpointError(f"{path} is corrupt: tensor {name!r} at bytes "
                                  f"{info.begin}..{info.end} {problem}")
        covered = info.end
    if covered != data_size:
        raise CheckpointError(f"{path} is corrupt: {data_size - covered} bytes after the last "
                              "tensor belong to no tensor")


def _save_dtype(path, name: str, array) -> np.dtype:
    """The little-endian dtype `array` is written as; an error for what safetensors cannot hold."""
    if not isinstance(array, np.ndarray):
        raise CheckpointError(f"cannot save {name!r} to {path}: expected a NumPy array, got "
                              f"{type(array).__name__}")
    dtype = array.dtype.newbyteorder("<")  # a big-endian array is byte-swapped when written
    if dtype not in SAVE_NAMES:
        raise CheckpointError(f"cannot save {name!r} to {path}: dtype {array.dtype} has no "
                              "safetensors equivalent")
    return dtype


def _is_int_list(value) -> bool:
    """A JSON list of non-negative integers (bool is an int in Python, so exclude it)."""
    return isinstance(value, list) and all(
        isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value)


def _no_duplicates(pairs: list[tuple[str, object]]) -> dict:
    """json object_pairs_hook: a repeated key is corruption, not 'last one wins'."""
    result = {}
    for key, value in pairs:
        if key in result:
            raise ValueError(f"duplicate key {key!r}")
        result[key] = value
    return result
