"""Mixtral (Jiang et al. 2024, "Mixtral of Experts"): models/moe.py's decoder without QK-norm,
8 experts, 2 per token, the two chosen weights always renormalised.

The math is models/moe.py's (itself LLaMA's with a sparse MLP); Mixtral is an arch of its own
only because its checkpoints name the MoE tensors differently (block_sparse_moe.experts.{e}.w1,
w3, w2 instead of mlp.experts.{e}.gate_proj, up_proj, down_proj: io/hf/mixtral.py), and one
arch has one tensor-name table. Matches transformers' `MixtralForCausalLM` (5.24).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from glassformer.models.moe import MoeLlamaConfig, family_of


@dataclass(frozen=True)
class MixtralConfig(MoeLlamaConfig):
    """MoeLlamaConfig with Mixtral's defaults (every field the same meaning)."""
    ARCH: ClassVar[str] = "mixtral"
    qk_norm: str = "none"           # Mixtral has no QK-norm
    norm_topk_prob: bool = True     # always, in Mixtral


FAMILY = family_of(MixtralConfig)
