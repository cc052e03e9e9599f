"""The NumPy twins of the kernels blocks/prefill_block.py calls, as one module with the names of
the compiled set (kernels/prefill.py), so a test runs the same layer on both and compares.

    norm_rows, add_norm_rows, swiglu_rows   kernels/decode_numpy.py's (rows of (N, C))
    rope_heads(x, cos, sin, out)            ops/rope.py's rope_forward on x (T, H, D), into out
                                            (H, T, D)
    tiled_attention_forward                 ops/tiled_attention.py's

The layer's composition (chunks of positions spread over threads, the products) is the block's
own and the same on both sets; only these calls differ.
"""
from __future__ import annotations

import numpy as np

from glassformer.kernels.decode_numpy import add_norm_rows, norm_rows, swiglu_rows  # noqa: F401
from glassformer.ops.rope import rope_forward
from glassformer.ops.tiled_attention import tiled_attention_forward  # noqa: F401


def rope_heads(x: np.ndarray, cos: np.ndarray, sin: np.ndarray, out: np.ndarray) -> None:
    """out (H, T, D) = RoPE of x (T, H, D) at the tables' T positions (cos, sin (T, D))."""
    out[...] = rope_forward(np.swapaxes(x, 0, 1), cos, sin)[0]          # (H, T, D)
