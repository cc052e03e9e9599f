"""Training data: a text file becomes token ids on disk once, then random (B, T) batches.

Pipeline, as nanoGPT's `prepare.py` + `get_batch`:

    text file --encode--> ids (.npy, uint16 if vocab <= 65536 else uint32, written atomically)
              --np.load(mmap_mode="r")--> 90/10 train/val split by position
              --get_batch(data, B, T, rng)--> x (B, T) int64, y (B, T) int64 = x shifted by one

`prepare_tokens` reuses an existing .npy only when the sidecar `<name>.npy.json` written after it
says it came from the same text file (size and modification time), the same vocab size and the
same tokenizer fingerprint; otherwise it encodes again. The sidecar is written last, so a run
killed mid-write leaves no sidecar and the next run re-encodes.

A large text is encoded in pieces of about ENCODE_PIECE characters behind a tqdm bar (quiet when
stderr is not a terminal), when the caller says its tokenizer's pieces join exactly (safe_pieces).

Batches come from an explicit `np.random.Generator`: the same seed gives the same batches.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Callable, Iterable

import numpy as np
from tqdm import tqdm

from glassformer.errors import GlassformerError
from glassformer.io.safetensors import write_atomically

VAL_FRACTION = 0.1  # nanoGPT: the last 10% of the ids, by position, are the validation split
ENCODE_PIECE = 1 << 20  # characters per piece when a text is encoded in pieces (progress bar)


def token_dtype(vocab_size: int) -> np.dtype:
    """uint16 when every id fits in 16 bits (vocab_size <= 65536), else uint32."""
    if not 1 <= vocab_size <= 2 ** 32:
        raise GlassformerError(f"expected vocab_size in [1, 2**32], got {vocab_size}")
    return np.dtype(np.uint16) if vocab_size <= 2 ** 16 else np.dtype(np.uint32)


def read_text(path: str | os.PathLike) -> str:
    """The UTF-8 text of a data file; clear errors for missing, empty or non-UTF-8 files.

    Files as editors write them (issue 32): a leading byte-order mark is dropped and Windows
    line ends (CRLF) become LF, silently, so a file saved by Notepad reads as the same text.
    """
    path = Path(path)
    if not path.is_file():
        what = "is a directory" if path.is_dir() else "does not exist"
        raise GlassformerError(f"data file {path} {what}")
    try:
        text = path.read_bytes().decode("utf-8-sig").replace("\r\n", "\n")
    except UnicodeDecodeError as err:
        raise GlassformerError(f"data file {path} is not UTF-8 text: {err}") from None
    if not text:
        raise GlassformerError(f"data file {path} is empty")
    return text


def file_fingerprint(path: str | os.PathLike) -> dict:
    """{"path", "size", "sha256"} of a data file: what a run records to notice a changed file."""
    path = Path(path)
    with open(path, "rb") as f:
        digest = hashlib.file_digest(f, "sha256")
    return {"path": str(path.resolve()), "size": path.stat().st_size,
            "sha256": digest.hexdigest()}


def safe_pieces(text: str, size: int = ENCODE_PIECE) -> Iterable[tuple[int, str]]:
    """(offset, piece) of `text` cut into pieces of about `size` characters.

    Each cut is right after a newline between two letters ("x\nY"), where the GPT-2, LLaMA-3 and
    SmolLM pre-tokenizers all end a pre-token ("x", "\n", "Y"), so a byte-level BPE (whose
    merges never cross a pre-token) or a char tokenizer gives the same ids piece by piece as for
    the whole text.
    """
    start = 0
    while len(text) - start > size:
        cut = text.find("\n", start + size)
        while cut != -1 and not (text[cut - 1].isalpha() and text[cut + 1:cut + 2].isalpha()):
            cut = text.find("\n", cut + 1)
        if cut == -1:
            break
        yield start, text[start:cut + 1]
        start = cut + 1
    yield start, text[start:]


def encode_text(text: str, encode: Callable[[str], Iterable[int]], *, in_pieces: bool = False,
                desc: str = "encoding") -> list[int]:
    """encode(text); in_pieces: piece by piece (safe_pieces) behind a progress bar."""
    if not in_pieces or len(text) <= ENCODE_PIECE:
        return list(encode(text))
    ids: list[int] = []
    with tqdm(total=len(text), desc=desc, unit="char", unit_scale=True, disable=None,
              file=sys.stderr) as bar:
        for offset, piece in safe_pieces(text):
            try:
                ids.extend(encode(piece))
            except GlassformerError as err:
                raise GlassformerError(f"{err} (in the piece from character {offset:,})") from None
            bar.update(len(piece))
    return ids


def encode_to_npy(text_path: str | os.PathLike, npy_path: str | os.PathLike, *,
                  encode: Callable[[str], Iterable[int]], vocab_size: int,
                  in_pieces: bool = False) -> np.ndarray:
    """Encode the text file with `encode` (in_pieces: see encode_text), write the ids to
    `npy_path` atomically, return them memory-mapped."""
    text_path = Path(text_path)
    ids = np.asarray(encode_text(read_text(text_path), encode, in_pieces=in_pieces,
                                 desc=f"encoding {text_path.name}"))
    if ids.ndim != 1 or ids.size == 0:
        raise GlassformerError(
            f"encoding {text_path} gave {ids.shape} ids; expected a non-empty 1-D sequence")
    if not np.issubdtype(ids.dtype, np.integer):
        raise GlassformerError(f"encoding {text_path} gave ids of dtype {ids.dtype}, expected "
                               "integers")
    low, high = int(ids.min()), int(ids.max())
    if low < 0 or high >= vocab_size:
        raise GlassformerError(f"encoding {text_path} gave ids in [{low}, {high}], outside the "
                               f"vocabulary [0, {vocab_size})")
    ids = ids.astype(token_dtype(vocab_size))
    write_atomically(npy_path, lambda f: np.save(f, ids, allow_pickle=False))
    return load_tokens(npy_path)


def prepare_tokens(text_path: str | os.PathLike, npy_path: str | os.PathLike, *,
                   encode: Callable[[str], Iterable[int]], vocab_size: int,
                   fingerprint: str = "", in_pieces: bool = False) -> np.ndarray:
    """The ids of `text_path`, memory-mapped from `npy_path`, encoding only when needed.

    `fingerprint` identifies the tokenizer (e.g. a hash of its JSON): a changed tokenizer or
    text file makes the stored ids stale, and they are encoded again.
    """
    text_path, npy_path = Path(text_path), Path(npy_path)
    read_text(text_path)  # note: checks the file exists, is non-empty UTF-8, before any reuse
    source = text_path.stat()
    wanted = {"source": str(text_path.resolve()), "source_size": source.st_size,
              "source_mtime_ns": source.st_mtime_ns, "vocab_size": vocab_size,
              "fingerprint": fingerprint}
    sidecar = npy_path.with_name(npy_path.name + ".json")
    if npy_path.is_file() and sidecar.is_file():
        try:
            stored = json.loads(sidecar.read_text(encoding="utf-8"))
        except (UnicodeDecodeError, ValueError):
            stored = None  # a damaged sidecar only means: encode again
        if stored == wanted:
            return load_tokens(npy_path)
    tokens = encode_to_npy(text_path, npy_path, encode=encode, vocab_size=vocab_size,
                           in_pieces=in_pieces)
    sidecar_bytes = json.dumps(wanted, indent=1).encode("utf-8")
    write_atomically(sidecar, lambda f: f.write(sidecar_bytes))
    return tokens


def load_tokens(npy_path: str | os.PathLike) -> np.ndarray:
    """A 1-D uint16/uint32 id array from `npy_path`, memory-mapped read-only (never pickled)."""
    npy_path = Path(npy_path)
    if not npy_path.is_file():
        raise GlassformerError(f"token file {npy_path} does not exist")
    try:
        tokens = np.load(npy_path, mmap_mode="r", allow_pickle=False)
    except ValueError as err:
        raise GlassformerError(f"token file {npy_path} is not a valid .npy file: {err}") from None
    if tokens.ndim != 1 or tokens.dtype not in (np.uint16, np.uint32) or tokens.size == 0:
        raise GlassformerError(f"token file {npy_path} holds {tokens.dtype} ids of shape "
                               f"{tokens.shape}; expected a non-empty 1-D uint16/uint32 array")
    return tokens


def split_train_val(tokens: np.ndarray, val_fraction: float = VAL_FRACTION
                    ) -> tuple[np.ndarray, np.ndarray]:
    """(train, val): the first (1 - val_fraction) of the ids, then the rest; views, no copy."""
    if not 0.0 <= val_fraction < 1.0:
        raise GlassformerError(f"expected val_fraction in [0, 1), got {val_fraction}")
    n_train = int(len(tokens) * (1.0 - val_fraction))  # nanoGPT: int(n * 0.9)
    return tokens[:n_train], tokens[n_train:]


def split_windows(tokens: np.ndarray, block_size: int, path) -> tuple[np.ndarray, np.ndarray]:
    """split_train_val, refusing a split too short for one window of block_size + 1 ids
    (`path` names the data in the message)."""
    train, val = split_train_val(tokens)
    for split, part in (("train", train), ("val", val)):
        if len(part) < block_size + 1:
            raise GlassformerError(
                f"the {split} split of {path} has {len(part)} tokens, fewer than block size "
                f"{block_size} + 1; use a smaller --block-size or more data")
    return train, val


def get_batch(data: np.ndarray, batch_size: int, block_size: int, rng: np.random.Generator,
              *, split: str = "data") -> tuple[np.ndarray, np.ndarray]:
    """B random windows of T + 1 consecutive ids: inputs x (B, T) and next-token targets y (B, T).

    Start positions are uniform in [0, len(data) - T), as nanoGPT's torch.randint. `split` names
    the data in error messages ("train", "val").
    """
    if not isinstance(rng, np.random.Generator):
        raise GlassformerError(f"expected rng to be a np.random.Generator, got "
                               f"{type(rng).__name__}")
    if data.ndim != 1 or not np.issubdtype(data.dtype, np.integer):
        raise GlassformerError(f"expected {split} to be a 1-D array of integer ids, got "
                               f"{data.dtype} of shape {data.shape}")
    if batch_size < 1 or block_size < 1:
        raise GlassformerError(f"expected batch_size >= 1 and block_size >= 1, got "
                               f"batch_size={batch_size}, block_size={block_size}")
    if len(data) < block_size + 1:
        raise GlassformerError(f"block size {block_size} needs at least {block_size + 1} tokens "
                               f"in the {split} split, got {len(data)}")
    starts = rng.integers(0, len(data) - block_size, size=batch_size)    # (B,)
    positions = starts[:, None] + np.arange(block_size)[None, :]         # (B,) -> (B, T)
    x = np.array(data[positions], dtype=np.int64)                       # gather (B, T) ids
    y = np.array(data[positions + 1], dtype=np.int64)                   # the next id of each
    return x, y
