"""The GGUF block formats glassformer reads and writes, by name: Q8_0, Q4_0, Q4_1, Q4_K (and Q5_0,
llama.cpp's fallback for a Q4_K row that is not a multiple of 256).

    name    GGML type id  weights a block  bytes a block  bits a weight  file
    q8_0         8              32               34            8.5       q8_0.py
    q4_0         2              32               18            4.5       q4_0.py
    q4_1         3              32               20            5.0       q4_1.py
    q4_k        12             256              144            4.5       q4_k.py
    q5_0         6              32               22            5.5       q5_0.py

Each format's module has BLOCK, BYTES, HALVES (where its float16 fields lie),
`dequantize(blocks (n, BYTES) uint8, out=None) -> (n, BLOCK) float32` and
`quantize((n, BLOCK) float32) -> (n, BYTES) uint8`. The type ids are ggml's
(`GGMLQuantizationType` in the gguf package), written here so that layer 1 needs no import of the
file reader.
"""
from __future__ import annotations

from types import ModuleType

import numpy as np

from glassformer.errors import GlassformerError
from glassformer.ops.quant import q4_0, q4_1, q4_k, q5_0, q8_0

FORMATS: dict[str, ModuleType] = {"q8_0": q8_0, "q4_0": q4_0, "q4_1": q4_1, "q4_k": q4_k,
                                  "q5_0": q5_0}
TYPE_IDS = {"q8_0": 8, "q4_0": 2, "q4_1": 3, "q4_k": 12, "q5_0": 6}   # ggml's type values


def format_of(name: str) -> ModuleType:
    """The module of format `name` ("q4_1" or "Q4_1"), or an error listing the supported ones."""
    module = FORMATS.get(name.lower())
    if module is None:
        raise GlassformerError(f"quantized type {name} is not supported; supported: "
                               f"{', '.join(n.upper() for n in FORMATS)}")
    return module


def scales_finite(kind: str, blocks: np.ndarray) -> bool:
    """Whether every float16 field of the blocks (R, row bytes) is finite: then so is every weight
    (a finite scale times a code of 0..255 plus a finite minimum), checked without widening W."""
    fmt = format_of(kind)
    per_block = blocks.reshape(-1, fmt.BYTES)                           # (R * blocks a row, BYTES)
    return all(np.isfinite(per_block[:, at:at + 2].view(np.float16)).all() for at in fmt.HALVES)
