"""Every gradcheck case, gathered from one module per op or block.

To add an op: write `cases/<op>.py` with a `CASES` list of `GradcheckCase`, then add it below.
`glassformer explain` runs some of these same cases (`find_case`) on its own inputs.
"""
from __future__ import annotations

from glassformer.errors import GlassformerError
from glassformer.gradcheck.cases import activation
from glassformer.gradcheck.cases import attention
from glassformer.gradcheck.cases import attention_block
from glassformer.gradcheck.cases import bert_mlm
from glassformer.gradcheck.cases import clamped_swiglu
from glassformer.gradcheck.cases import cross_entropy
from glassformer.gradcheck.cases import delta_rule
from glassformer.gradcheck.cases import dropout
from glassformer.gradcheck.cases import embedding
from glassformer.gradcheck.cases import gated_delta_block
from glassformer.gradcheck.cases import layer_norm
from glassformer.gradcheck.cases import linear
from glassformer.gradcheck.cases import lora
from glassformer.gradcheck.cases import mla
from glassformer.gradcheck.cases import mlp_block
from glassformer.gradcheck.cases import moe
from glassformer.gradcheck.cases import moe_balance
from glassformer.gradcheck.cases import residual_block
from glassformer.gradcheck.cases import rms_norm
from glassformer.gradcheck.cases import rope
from glassformer.gradcheck.cases import sae
from glassformer.gradcheck.cases import seq2seq
from glassformer.gradcheck.cases import sink
from glassformer.gradcheck.cases import softmax
from glassformer.gradcheck.cases import swiglu
from glassformer.gradcheck.cases import tiled_attention
from glassformer.gradcheck.core import GradcheckCase

_MODULES = [
    linear,
    lora,
    attention,
    tiled_attention,
    cross_entropy,
    dropout,
    embedding,
    layer_norm,
    rms_norm,
    softmax,
    sink,
    activation,
    swiglu,
    clamped_swiglu,
    rope,
    attention_block,
    mla,
    mlp_block,
    moe,
    residual_block,
    seq2seq,
    bert_mlm,
    moe_balance,
    sae,
    delta_rule,
    gated_delta_block,
]

ALL_CASES = [case for module in _MODULES for case in module.CASES]


def find_case(name: str, mode: str) -> GradcheckCase:
    """The registered case `name` in `mode`, e.g. find_case("layer_norm", "bias")."""
    for case in ALL_CASES:
        if case.name == name and case.mode == mode:
            return case
    raise GlassformerError(f"no gradcheck case {name} {mode}")
