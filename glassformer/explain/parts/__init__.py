"""Every part `glassformer explain` knows, in the order `--help` lists them: the seed's attention
first, then ops, then the block and the model built from them. One file per op topic; each part
keeps its own English and Chinese text beside its steps (see explain/core.py for the protocol).
"""
from __future__ import annotations

import numpy as np

from glassformer.errors import GlassformerError
from glassformer.explain.core import Part, Result, resolve_options, run
from glassformer.explain.size import check_walkthrough_size
from glassformer.explain.parts.activation import GELU, SILU, SWIGLU
from glassformer.explain.parts.attention import ATTENTION
from glassformer.explain.parts.attention_block import MHA
from glassformer.explain.parts.cross_attention import CROSS_ATTENTION
from glassformer.explain.parts.dpo import DPO
from glassformer.explain.parts.embedding import EMBEDDING
from glassformer.explain.parts.eval import EVAL
from glassformer.explain.parts.gpt2 import GPT2
from glassformer.explain.parts.grpo import GRPO
from glassformer.explain.parts.lora import LORA
from glassformer.explain.parts.mla import MLA
from glassformer.explain.parts.moe import MOE
from glassformer.explain.parts.norm import LAYER_NORM, RMS_NORM
from glassformer.explain.parts.quant import QUANT
from glassformer.explain.parts.residual_block import BLOCK
from glassformer.explain.parts.rope import ROPE
from glassformer.explain.parts.sink import SINK
from glassformer.explain.parts.softmax import CROSS_ENTROPY, SOFTMAX
from glassformer.explain.parts.window import WINDOW

PARTS: dict[str, Part] = {part.name: part for part in (
    ATTENTION, LAYER_NORM, RMS_NORM, GELU, SILU, SWIGLU, SOFTMAX, CROSS_ENTROPY, EMBEDDING, ROPE,
    LORA, MHA, MLA, CROSS_ATTENTION, BLOCK, GPT2, MOE, DPO, GRPO, WINDOW, SINK, QUANT)}
# Walkthroughs of what a whole model is used for: forward only, no gradient to check.
WALKTHROUGHS: dict[str, Part] = {part.name: part for part in (EVAL,)}


def explain_part(name: str, given: dict, *, seed: int, grad: str | None = None) -> Result:
    """Run part `name` with the options given (None = the part's default).

    grad: None for the forward only, else the upstream gradient G, "ones" or "random".
    """
    if name in WALKTHROUGHS:
        if grad is not None:
            raise GlassformerError(f"explain {name} has no backward pass: it only reads the "
                                   "model (drop --backward)")
        part = WALKTHROUGHS[name]
        return run(part, resolve_options(part, given), np.random.default_rng(seed), grad=None)
    if name not in PARTS:
        raise GlassformerError(f"unknown part {name!r}; parts: {', '.join(PARTS)}")
    if grad not in (None, "ones", "random"):
        raise GlassformerError(f"expected grad 'ones' or 'random', got {grad!r}")
    part = PARTS[name]
    options = resolve_options(part, given)
    check_walkthrough_size(name, part.defaults, options, given, backward=grad is not None)
    return run(part, options, np.random.default_rng(seed), grad=grad)
