"""Where a loaded model's weights lie in memory: laid out for decoding, once, when it is loaded.

Decoding reads every weight once per token with matrix-vector products x (1, C_in) @ W, so
memory bandwidth sets its speed, and how W lies decides how fast OpenBLAS streams it. Measured on
this project's machine (docs/performance.md, issue 33): a widening W (C_in <= C_out) streams
1.3-1.7x faster row-major (C-contiguous (in, out)) than column-major, and a narrowing one
(w_down) about as fast either way. Checkpoints store nn.Linear's (out, in), so a loaded (in, out)
weight is a transposed, column-major view: the slow layout. Here:

    attn.wq | attn.wk | attn.wv    packed side by side, row-major (and bq | bk | bv): one product
    mlp.w_gate | mlp.w_up          packed side by side, row-major: one product (blocks/packed.py)
    attn.wo, mlp.w_up, lm_head     row-major
    mlp.w_down, embeddings, norms  as loaded

A GGUF file's weights kept in their blocks (ops/quant/matrix.py) pack too: q | k | v and
gate | up of one kind each become one blocks array, W's rows stacked (blocks/packed.py), so a
quantized SmolLM2 token makes 121 products instead of 211. The copy is made once, here, and
the originals' pages are handed to `release` (io/gguf.py drops them from its memory map), so
the model holds the packed copy instead of, not beside, the mapped blocks.

Keys, shapes and values stay the same (tests/models/test_layout.py): the blocks find a packed
group from the views themselves and fall back to one product per weight otherwise, and every
writer copies views to contiguous arrays. Saved checkpoints and training params never change.
"""
from __future__ import annotations

import numpy as np

from collections.abc import Callable

from glassformer.blocks.packed import pack_columns, stackable
from glassformer.ops.quant.matrix import QuantizedMatrix

# suffixes of the groups packed side by side, each led by the name that marks a block holding it
PACKED_GROUPS = (("attn.wq", "attn.wk", "attn.wv"), ("attn.bq", "attn.bk", "attn.bv"),
                 ("mlp.w_gate", "mlp.w_up"))
# widening projections made row-major when they are not packed
ROW_MAJOR = ("attn.wo", "mlp.w_up", "lm_head")


def _packable(params: dict, names: list[str]) -> bool:
    """Every name present, all of one dtype, with the same leading dims (the same input); or
    all GGUF blocks of one kind and row length (blocks/packed.py: stackable)."""
    parts = [params.get(name) for name in names]
    if all(isinstance(part, QuantizedMatrix) for part in parts):
        return stackable(parts)
    if not all(isinstance(part, np.ndarray) for part in parts):
        return False                  # absent, or float and quantized mixed: left as they are
    return (len({part.dtype for part in parts}) == 1 and parts[0].ndim in (1, 2)
            and len({part.shape[:-1] for part in parts}) == 1)


def lay_out_for_decoding(params: dict, release: Callable[[list], None] | None = None) -> None:
    """Rearrange `params` in place as the module docstring says (same keys, order and values).
    release: called with each packed group's original parts once their copy exists (the loader
    of a memory-mapped file frees their pages: io/gguf.py).

    note: in place, so that each original weight is dropped as soon as its copy exists: loading
    then peaks about one layer above the model's size, not at twice it (when nothing else holds
    the originals)."""
    packed = set()
    for suffixes in PACKED_GROUPS:
        for key in [key for key in params if key.endswith(suffixes[0])]:
            prefix = key[:-len(suffixes[0])]
            names = [prefix + suffix for suffix in suffixes]
            if _packable(params, names):
                originals = [params[name] for name in names]
                params.update(zip(names, pack_columns(originals)))   # the originals dropped here
                if release is not None:
                    release(originals)
                packed.update(names)
    for key, value in params.items():
        if not isinstance(value, np.ndarray):
            continue                  # a QuantizedMatrix: its blocks are laid out as stored
        widening = value.ndim == 2 and value.shape[0] <= value.shape[1]
        if key.endswith(ROW_MAJOR) and key not in packed and widening:
            params[key] = np.ascontiguousarray(value)            # no copy when it already is
