"""Gradcheck cases for layer norm: with and without bias, two eps values, 2-d and 3-d inputs."""
from __future__ import annotations

from functools import partial

from glassformer.gradcheck.cases._weight_bias import weight_bias_case
from glassformer.ops.layer_norm import layer_norm_backward, layer_norm_forward


def _case(mode, *, shape, bias, eps):
    return weight_bias_case("layer_norm", mode, partial(layer_norm_forward, eps=eps),
                            layer_norm_backward, x_shape=shape, w_shape=(shape[-1],), bias=bias)


CASES = [
    _case("bias", shape=(2, 3, 5), bias=True, eps=1e-5),
    _case("no-bias", shape=(2, 3, 5), bias=False, eps=1e-5),
    # A large eps makes the eps term matter in rstd, so a misplaced eps would show.
    _case("bias-eps-0.5", shape=(4, 6), bias=True, eps=0.5),
    _case("one-row", shape=(7,), bias=True, eps=1e-12),
]
