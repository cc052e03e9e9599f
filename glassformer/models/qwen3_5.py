"""Qwen3.5 (text): Qwen3-Next's hybrid with dense MLPs, under its own arch because its checkpoints
name and lay out the Gated DeltaNet projections differently (in_proj_qkv, in_proj_z, in_proj_b,
in_proj_a; io/hf/qwen3_next.py). The math, init and cache are models/qwen3_next.py's, and its
multimodal RoPE is plain RoPE for text (all three position axes equal), so nothing else differs.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import ClassVar

from glassformer.models import qwen3_next
from glassformer.models.qwen3_next import Qwen3NextConfig


@dataclass(frozen=True)
class Qwen35Config(Qwen3NextConfig):
    ARCH: ClassVar[str] = "qwen3_5"


FAMILY = replace(qwen3_next.FAMILY, name=Qwen35Config.ARCH, config=Qwen35Config)
