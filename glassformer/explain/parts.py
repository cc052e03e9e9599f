"""`glassformer explain PART`: the table of parts and the one call the command makes.

Each part lives in a topic file (parts_norm, parts_act, parts_loss, parts_embed, parts_attn,
parts_block, parts_gpt2) as a `Part` (see parts_core); its explanations are in parts_text.
"""
from __future__ import annotations

import numpy as np

from glassformer.errors import GlassformerError
from glassformer.explain.parts_act import GELU, SILU, SWIGLU
from glassformer.explain.parts_attn import MHA
from glassformer.explain.parts_block import BLOCK
from glassformer.explain.parts_core import Part, PartResult, resolve_options, run_part
from glassformer.explain.parts_embed import EMBEDDING, ROPE
from glassformer.explain.parts_gpt2 import GPT2
from glassformer.explain.parts_loss import CROSS_ENTROPY, SOFTMAX
from glassformer.explain.parts_norm import LAYER_NORM, RMS_NORM

# In the order `--help` lists them: ops first, then the block and the model built from them.
PARTS: dict[str, Part] = {part.name: part for part in (
    LAYER_NORM, RMS_NORM, GELU, SILU, SWIGLU, SOFTMAX, CROSS_ENTROPY, EMBEDDING, ROPE, MHA,
    BLOCK, GPT2)}


def explain_part(name: str, given: dict, *, seed: int, grad: str | None = None) -> PartResult:
    """Run part `name` with the options given (None = the part's default).

    grad: None for the forward only, else the upstream gradient G, "ones" or "random".
    """
    if name not in PARTS:
        raise GlassformerError(f"unknown part {name!r}; parts: {', '.join(PARTS)}")
    if grad not in (None, "ones", "random"):
        raise GlassformerError(f"expected grad 'ones' or 'random', got {grad!r}")
    part = PARTS[name]
    options = resolve_options(part, given)
    return run_part(part, options, np.random.default_rng(seed), grad=grad)
