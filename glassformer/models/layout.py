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

Keys, shapes and values stay the same (tests/models/test_layout.py): the blocks find a packed
group from the views themselves and fall back to one product per weight otherwise, and every
writer copies views to contiguous arrays. Saved checkpoints and training params never change.
"""
from __future__ import annotations

import numpy as np

from glassformer.blocks.packed import pack_columns

# suffixes of the groups packed side by side, each led by the name that marks a block holding it
PACKED_GROUPS = (("attn.wq", "attn.wk", "attn.wv"), ("attn.bq", "attn.bk", "attn.bv"),
                 ("mlp.w_gate", "mlp.w_up"))
# widening projections made row-major when they are not packed
ROW_MAJOR = ("attn.wo", "mlp.w_up", "lm_head")


def _packable(params: dict, names: list[str]) -> bool:
    """Every name present, all of one dtype, with the same leading dims (the same input)."""
    if not all(isinstance(params.get(name), np.ndarray) for name in names):
        return False                  # absent, or a QuantizedMatrix (ops/quant/): left as it is
    parts = [params[name] for name in names]
    return (len({part.dtype for part in parts}) == 1 and parts[0].ndim in (1, 2)
            and len({part.shape[:-1] for part in parts}) == 1)


def lay_out_for_decoding(params: dict) -> None:
    """Rearrange `params` in place as the module docstring says (same keys, order and values).

    note: in place, so that each original weight is dropped as soon as its copy exists: loading
    then peaks about one layer above the model's size, not at twice it (when nothing else holds
    the originals)."""
    packed = set()
    for suffixes in PACKED_GROUPS:
        for key in [key for key in params if key.endswith(suffixes[0])]:
            prefix = key[:-len(suffixes[0])]
            names = [prefix + suffix for suffix in suffixes]
            if _packable(params, names):
                views = pack_columns([params[name] for name in names])
                params.update(zip(names, views))                 # the originals are dropped here
                packed.update(names)
    for key, value in params.items():
        if not isinstance(value, np.ndarray):
            continue                  # a QuantizedMatrix: its blocks are laid out as stored
        widening = value.ndim == 2 and value.shape[0] <= value.shape[1]
        if key.endswith(ROW_MAJOR) and key not in packed and widening:
            params[key] = np.ascontiguousarray(value)            # no copy when it already is
