"""`open_reader(path)`: gguf's GGUFReader, with a GGUF file's metadata arrays read as whole lists.

gguf's reader turns every metadata value into NumPy views of the file's map, one view per string
length, one per string's bytes, one per number, kept in a ReaderField's `parts`: for SmolLM2's
49,152 tokens, 48,900 merges and 49,152 token types that is about 340k small NumPy objects (some
150 MB of Python objects at the load's peak). Freed, they still leave the allocator holding much
of that memory, which the rest of the process then fills: the process's peak is higher by it.

Here an array of strings or of numbers is read from the map in one pass into one Python list (of
str) or one NumPy array (of numbers), and given back by the same `contents()` the rest of the
code calls (a str list, a list of Python numbers); every other field (scalars, single strings,
the tensor infos) and every tensor's data are gguf's own, unchanged:

    array field in the file:   item type u32, count u64, then count items
                               (a string item: length u64, then that many UTF-8 bytes)

A file in the other byte order (a big-endian GGUF) is read by gguf's own code throughout.
"""
from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import numpy as np

STRING, ARRAY = 8, 9                     # GGUFValueType's STRING and ARRAY
U64 = struct.Struct("<Q")


class ArrayField:
    """A metadata array, read whole: gguf ReaderField's `name`, `types` and `contents()`.

    note: `parts` and `data` are left empty (gguf's views are what this avoids); glassformer
    reads arrays only through contents()."""

    def __init__(self, offset: int, name: str, types: list, values: list | np.ndarray):
        self.offset, self.name, self.types, self.values = offset, name, types, values
        self.parts: list = []
        self.data: list = []

    def contents(self, index_or_slice: int | slice = slice(None)) -> Any:
        """The items (str, or Python numbers), or the one at an index, as gguf's contents()."""
        chosen = self.values[index_or_slice]
        if isinstance(self.values, np.ndarray):
            return chosen.tolist()
        return chosen if isinstance(chosen, str) else list(chosen)


def read_strings(data, at: int, count: int) -> tuple[list[str], int]:
    """`count` length-prefixed UTF-8 strings from data[at:] -> (the strings, the offset after)."""
    strings = []
    for _ in range(count):
        (length,) = U64.unpack_from(data, at)
        at += 8
        strings.append(bytes(data[at:at + length]).decode("utf-8"))
        at += length
    return strings, at


def open_reader(path: str | Path):
    """A GGUFReader over the file whose arrays are ArrayFields (see the module docstring)."""
    from gguf import GGUFReader, GGUFValueType, ReaderField  # only GGUF files need gguf

    class LeanReader(GGUFReader):
        """GGUFReader with `_build_fields` reading arrays whole (the rest is gguf's)."""

        def _build_fields(self, offs: int, count: int) -> int:
            if self.byte_order == "S":
                return super()._build_fields(offs, count)
            buffer = memoryview(self.data)
            for _ in range(count):
                orig_offs = offs
                kv_klen, kv_kdata = self._get_str(offs)
                offs += int(kv_klen.nbytes + kv_kdata.nbytes)
                raw_kv_type = self._get(offs, np.uint32)
                offs += int(raw_kv_type.nbytes)
                name = str(bytes(kv_kdata), encoding="utf-8")
                if int(raw_kv_type[0]) == ARRAY:
                    item_type = int(self._get(offs, np.uint32)[0])
                    length = int(self._get(offs + 4, np.uint64)[0])
                    start = offs + 12
                    types = [GGUFValueType.ARRAY, GGUFValueType(item_type)]
                    if item_type == STRING:
                        values, offs = read_strings(buffer, start, length)
                    elif GGUFValueType(item_type) in self.gguf_scalar_to_np:
                        values = self._get(start, self.gguf_scalar_to_np[GGUFValueType(item_type)],
                                           length)
                        offs = start + int(values.nbytes)
                    else:   # nested arrays: gguf's own parts
                        offs = self._gguf_field(orig_offs, name, offs, raw_kv_type, kv_klen,
                                                kv_kdata, ReaderField)
                        continue
                    self._push_field(ArrayField(orig_offs, name, types, values), skip_sum=True)
                    continue
                offs = self._gguf_field(orig_offs, name, offs, raw_kv_type, kv_klen, kv_kdata,
                                        ReaderField)
            return offs

        def _gguf_field(self, orig_offs, name, offs, raw_kv_type, kv_klen, kv_kdata,
                        field_class) -> int:
            """One field as gguf's _build_fields makes it; the offset after it."""
            parts = [kv_klen, kv_kdata, raw_kv_type]
            size, field_parts, field_idxs, field_types = self._get_field_parts(offs,
                                                                               raw_kv_type[0])
            self._push_field(field_class(orig_offs, name, parts + field_parts,
                                         [idx + len(parts) for idx in field_idxs], field_types),
                             skip_sum=True)
            return offs + size

    return LeanReader(str(path))
