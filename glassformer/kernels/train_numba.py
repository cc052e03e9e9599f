"""The training kernels (numba): one module that kernels/choice.py's train_kernels hands out.

Each function has the name, arguments and results of its NumPy twin, the reference that the
tests compare it with and `GLASSFORMER_KERNELS=numpy` runs instead:

    layer_norm_forward, layer_norm_backward   ops/layer_norm.py      norm_numba.py
    rms_norm_forward, rms_norm_backward       ops/rms_norm.py        norm_numba.py
    gelu_forward (the tanh form, float32)     ops/activation.py      activation_numba.py
    swiglu_forward, swiglu_backward           ops/swiglu.py          activation_numba.py
    softmax_forward, softmax_backward         ops/softmax.py         softmax_numba.py
    adamw_update                              train/optim.py         adamw_numba.py

Where a twin makes 5-15 NumPy passes over an activation, each with its own temporary, a kernel
reads each element once or keeps a row in L1. Arrays a kernel does not take (other dtypes,
strided views) go to the twin from inside the kernel's function, so callers choose once:
blocks/norm.py, blocks/mlp.py, ops/attention.py (its softmax) and train/optim.py, through
train_kernels. Figures:
docs/performance.md, "Issue 44: compiled training kernels".

Imported only through kernels/choice.py (which sets numba's cache folder first); compiled on
first use and cached on disk.
"""
from glassformer.kernels.activation_numba import gelu_forward, swiglu_backward, swiglu_forward
from glassformer.kernels.adamw_numba import adamw_update
from glassformer.kernels.norm_numba import (layer_norm_backward, layer_norm_forward,
                                            rms_norm_backward, rms_norm_forward)
from glassformer.kernels.softmax_numba import softmax_backward, softmax_forward

__all__ = ["adamw_update", "gelu_forward", "layer_norm_backward", "layer_norm_forward",
           "rms_norm_backward", "rms_norm_forward", "softmax_backward", "softmax_forward",
           "swiglu_backward", "swiglu_forward"]
