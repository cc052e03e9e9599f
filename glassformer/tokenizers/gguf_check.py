"""Walk a GGUF file's layout before the gguf package reads it: truncated or corrupt, and where.

gguf's GGUFReader maps the file and fails on a cut or damaged one with its own internals ("index
0 is out of bounds for axis 0 with size 0", "cannot reshape array of size 10"). This walk reads
only the layout, in the order the format lays it out (GGUF v2/v3, little-endian):

    header       "GGUF", version u32, tensor count u64, metadata count u64
    metadata     per key: name (u64 length + UTF-8), value type u32, value
                 (arrays: element type u32, count u64, elements)
    tensor info  per tensor: name, n_dims u32, dims u64 x n_dims, ggml type u32, offset u64
    data         from the next multiple of general.alignment (default 32): each tensor at its offset

and names the first place that does not fit: "truncated" when the file ends inside something
whose declared size the file could hold, "corrupt" when a field is impossible (a length longer
than the whole file, an unknown type). Token strings and weights themselves are not checked.
Used by both GGUF readers: the tokenizer's (tokenizers/bpe_files.py) and the model's (io/gguf.py).
"""
from __future__ import annotations

import mmap
import struct
from pathlib import Path

from glassformer.errors import GlassformerError

HEADER = struct.Struct("<4sIQQ")  # magic, version, tensor count, metadata count
# metadata value type -> size in bytes of one value (8 STRING and 9 ARRAY are read separately)
SCALAR_SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
STRING, ARRAY = 8, 9
MAX_DIMS = 4  # ggml tensors have at most 4 dimensions


class Walk:
    """A read position in the file's bytes, with reads that say what they were reading."""

    def __init__(self, data, path: Path) -> None:
        self.data, self.path, self.at = data, path, 0

    def fail(self, kind: str, what: str, detail: str) -> GlassformerError:
        return GlassformerError(f"{self.path} is {kind} GGUF: {what} {detail}")

    def skip(self, size: int, what: str, *, declared: bool = False) -> int:
        """Step over `size` bytes; returns where they start. `declared`: the size was read from
        the file, so a size beyond the whole file means the field is damaged, not cut."""
        if declared and size > len(self.data):
            raise self.fail("a corrupt", what, f"declares {size} bytes at byte {self.at}, more "
                            f"than the whole file ({len(self.data)} bytes)")
        if self.at + size > len(self.data):
            raise self.fail("a truncated", what, f"needs bytes {self.at}-{self.at + size - 1}; "
                            f"the file ends at {len(self.data)}")
        start, self.at = self.at, self.at + size
        return start

    def take(self, size: int, what: str, *, declared: bool = False) -> bytes:
        start = self.skip(size, what, declared=declared)
        return self.data[start:self.at]

    def number(self, form: str, what: str) -> int:
        return struct.unpack("<" + form, self.take(struct.calcsize(form), what))[0]

    def string(self, what: str) -> str:
        raw = self.take(self.number("Q", what), what, declared=True)
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise self.fail("a corrupt", what, f"is not UTF-8 (ends at byte {self.at})") from None


def skip_value(walk: Walk, value_type: int, what: str) -> None:
    """Step over one metadata value of `value_type`."""
    if value_type == STRING:
        walk.skip(walk.number("Q", what), what, declared=True)
    elif value_type == ARRAY:
        element_type = walk.number("I", what)
        count = walk.number("Q", what)
        if element_type in SCALAR_SIZES:
            walk.skip(count * SCALAR_SIZES[element_type], what, declared=True)
        elif element_type == STRING:
            skip_strings(walk, count, what)
        else:
            raise walk.fail("a corrupt", what, f"has arrays of unknown type {element_type}")
    elif value_type in SCALAR_SIZES:
        walk.take(SCALAR_SIZES[value_type], what)
    else:
        raise walk.fail("a corrupt", what, f"has unknown value type {value_type} "
                        f"(before byte {walk.at})")


def skip_strings(walk: Walk, count: int, what: str) -> None:
    """Step over an array of `count` strings (a vocabulary: 50k-150k of them).

    note: lengths are read straight from the buffer, not through Walk.number: three calls per
    string made this loop most of the check's time. A string that does not fit is re-read
    through Walk.skip, which names what went wrong.
    """
    at, end = walk.at, len(walk.data)
    for _ in range(count):
        if at + 8 > end:
            break
        length = int.from_bytes(walk.data[at:at + 8], "little")
        if at + 8 + length > end:
            break
        at += 8 + length
    else:
        walk.at = at
        return
    walk.at = at
    walk.skip(walk.number("Q", what), what, declared=True)  # raises: this string is cut


def check_gguf(path: Path) -> None:
    """Raise a one-line GlassformerError if the file's layout is cut short or impossible."""
    if not path.is_file():
        raise GlassformerError(f"no GGUF file at {path}")
    if path.stat().st_size == 0:
        raise GlassformerError(f"{path} is empty, not a GGUF file")
    with path.open("rb") as file, mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:
        walk_layout(Walk(data, path))


def walk_layout(walk: Walk) -> None:
    """Header, metadata, tensor infos, then the bounds of every tensor's data (not read)."""
    from gguf import GGML_QUANT_SIZES, GGUF_DEFAULT_ALIGNMENT  # only GGUF files need gguf

    path = walk.path
    magic = bytes(walk.data[:4])
    if magic != b"GGUF"[:len(magic)]:
        raise GlassformerError(f"{path} is not a GGUF file: it starts with {magic!r}, not b'GGUF'")
    _, version, n_tensors, n_keys = HEADER.unpack(walk.take(HEADER.size, "the header"))
    if version not in (2, 3):
        raise walk.fail("a corrupt", "the header", f"gives version {version} (2 and 3 exist)")
    alignment = GGUF_DEFAULT_ALIGNMENT
    for k in range(n_keys):
        key = walk.string(f"metadata key {k}'s name")
        value_type = walk.number("I", f"metadata key {k} ({key})")
        if key == "general.alignment" and value_type == 4:
            alignment = walk.number("I", f"metadata key {k} ({key})")
        else:
            skip_value(walk, value_type, f"metadata key {k} ({key})")
    tensors = []
    for k in range(n_tensors):
        name = walk.string(f"tensor info {k}'s name")
        what = f"tensor info {k} ({name})"
        n_dims = walk.number("I", what)
        if n_dims > MAX_DIMS:
            raise walk.fail("a corrupt", what, f"has {n_dims} dimensions (ggml has at most 4)")
        dims = [walk.number("Q", what) for _ in range(n_dims)]
        ggml_type = walk.number("I", what)
        if ggml_type not in GGML_QUANT_SIZES:
            raise walk.fail("a corrupt", what, f"has unknown ggml type {ggml_type}")
        block, block_bytes = GGML_QUANT_SIZES[ggml_type]
        n_elements = 1
        for size in dims:
            n_elements *= size
        tensors.append((name, walk.number("Q", what), n_elements // block * block_bytes))
    data_start = -(-walk.at // alignment) * alignment  # the next multiple of the alignment
    for name, offset, n_bytes in tensors:
        walk.at = data_start + offset
        walk.skip(n_bytes, f"the data of tensor {name}")  # sized by dims: a cut file ends early
