"""DeepSeek-V3's auxiliary-loss-free balancing: a per-expert bias moved against the load.

DeepSeek-V3 (2024, section 2.1.2; Wang et al. 2024, "Auxiliary-Loss-Free Load Balancing") adds a
bias b_{l,e} to the router scores only to choose the top-k experts; the weights that mix the
experts' outputs still come from the unbiased scores, so the bias steers traffic without
entering the loss or its gradient. After every training step each layer's bias moves by a fixed
gamma against that step's load:

    load_{l,e}   = routed token-slots of expert e in layer l (padding rows uncounted)
    b_{l,e}     <- b_{l,e} - gamma   if load_{l,e} > mean_e load_{l,e}   (overloaded: chosen less)
    b_{l,e}     <- b_{l,e} + gamma   if load_{l,e} < mean_e load_{l,e}   (underloaded: chosen more)

An expert exactly at the mean keeps its bias. This is a rule, not a differentiable op: no
backward, and a pure function that returns the new bias (the caller keeps it, like an optimizer
keeps its moments). The load comes from the chosen experts through `expert_counts`
(ops/load_balance.py); taking counts rather than the chosen ids lets a data-parallel run sum
them over its ranks first.
"""
from __future__ import annotations

import numpy as np

from glassformer.ops._check import check_float, check_shape
from glassformer.ops._scalars import check_eps
from glassformer.ops.load_balance import expert_counts


def expert_bias_update(bias: np.ndarray, load: np.ndarray, *, gamma: float) -> np.ndarray:
    """The bias after one step: bias (L, E) and that step's load (L, E) -> new bias (L, E).

    load: what each expert received in each layer, in any unit that is the same for every
    expert of a layer (slot counts from `expert_counts`, or shares of them); only how each
    compares with its layer's mean matters.

    >>> counts = expert_counts(np.array([[[0], [0], [1], [0]]]), 3)    # (L=1, N=4, k=1)
    >>> expert_bias_update(np.zeros((1, 3)), counts, gamma=0.5).tolist()
    [[-0.5, 0.5, 0.5]]
    """
    check_float("bias", bias)
    sizes = check_shape("bias", bias, ("L", "E"), {})
    check_shape("load", check_float("load", load), ("L", "E"), sizes)
    step = check_eps("gamma", gamma)                                       # finite, >= 0
    total = load.sum(axis=1, keepdims=True)                                # (L, 1)
    # load > mean  <=>  E * load > total: with whole-number counts this compares exactly, so
    # an expert at the mean is seen as such (a divided mean could round either way).
    # sign: +1 under the mean, -1 over it, 0 exactly at it.
    direction = np.sign(total - sizes["E"] * load).astype(bias.dtype)      # (L, E)
    return bias + direction * step
