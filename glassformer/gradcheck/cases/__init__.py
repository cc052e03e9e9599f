"""Every gradcheck case, gathered from one module per op or block.

To add an op: write `cases/<op>.py` with a `CASES` list of `GradcheckCase`, then add it below.
"""
from __future__ import annotations

from glassformer.gradcheck.cases import activation
from glassformer.gradcheck.cases import attention
from glassformer.gradcheck.cases import attention_block
from glassformer.gradcheck.cases import cross_entropy
from glassformer.gradcheck.cases import dropout
from glassformer.gradcheck.cases import embedding
from glassformer.gradcheck.cases import layer_norm
from glassformer.gradcheck.cases import linear
from glassformer.gradcheck.cases import mlp_block
from glassformer.gradcheck.cases import residual_block
from glassformer.gradcheck.cases import rms_norm
from glassformer.gradcheck.cases import rope
from glassformer.gradcheck.cases import swiglu

_MODULES = [
    linear,
    attention,
    cross_entropy,
    dropout,
    embedding,
    layer_norm,
    rms_norm,
    activation,
    swiglu,
    rope,
    attention_block,
    mlp_block,
    residual_block,
]

ALL_CASES = [case for module in _MODULES for case in module.CASES]
