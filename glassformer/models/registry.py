"""Model families by name: the `Family` record each family module exports (models/family.py).

Training, generation and loading use a family through this one table, so they work for every
family without naming it; a reader follows `family("llama").forward` straight to llama.forward.
"""
from __future__ import annotations

from glassformer.errors import GlassformerError
from glassformer.models import (bert, deepseek_v3, gemma3, gpt2, gpt_oss, llama, mixtral, moe,
                                qwen3_5, qwen3_next, seq2seq)
from glassformer.models.family import Family

# arch name -> its Family record
FAMILIES: dict[str, Family] = {f.name: f for f in (gpt2.FAMILY, llama.FAMILY, bert.FAMILY,
                                                   seq2seq.FAMILY, moe.FAMILY, mixtral.FAMILY,
                                                   deepseek_v3.FAMILY, gemma3.FAMILY,
                                                   gpt_oss.FAMILY, qwen3_next.FAMILY,
                                                   qwen3_5.FAMILY)}


def family(arch: str) -> Family:
    """The Family of architecture `arch` ("gpt2", "llama", "bert")."""
    if arch not in FAMILIES:
        raise GlassformerError(f"unknown architecture {arch!r}; known: {sorted(FAMILIES)}")
    return FAMILIES[arch]


def config_from_dict(data: dict):
    """Rebuild a config saved with `config.to_dict()` (its "arch" key picks the family)."""
    arch = data.get("arch")
    if arch is None:
        raise GlassformerError("model config has no 'arch' key (expected gpt2, llama or bert)")
    return family(arch).config.from_dict(data)


def arch_of(cfg) -> str:
    """The arch name of a config object ("gpt2", "llama", "bert")."""
    return cfg.ARCH
