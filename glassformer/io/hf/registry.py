"""Hugging Face families by glassformer arch, and their model_types by config.json's name.

io/hf_config.py, io/hf_names.py, io/pretrained.py and io/peft.py reach a family's Hugging Face
form only through these two lookups, so they work for every family without naming it.
"""
from __future__ import annotations

from glassformer.errors import GlassformerError
from glassformer.io.hf import (bert, deepseek_v3, gemma3, gpt2, gpt_oss, llama, mixtral, moe,
                               qwen3_next, seq2seq)
from glassformer.io.hf.records import HFFamily, ModelType

# glassformer arch -> its HFFamily
FAMILIES: dict[str, HFFamily] = {f.arch: f for f in (gpt2.FAMILY, llama.FAMILY, bert.FAMILY,
                                                     seq2seq.FAMILY, moe.FAMILY, mixtral.FAMILY,
                                                     deepseek_v3.FAMILY, gemma3.FAMILY,
                                                     gpt_oss.FAMILY, qwen3_next.FAMILY,
                                                     qwen3_next.FAMILY_3_5)}
# config.json model_type -> its ModelType, in the order error messages list them
MODEL_TYPES: dict[str, ModelType] = {t.name: t for f in FAMILIES.values() for t in f.model_types}


def hf_family(arch: str) -> HFFamily:
    """The Hugging Face form of glassformer's arch `arch`."""
    if arch not in FAMILIES:
        raise GlassformerError(f"no Hugging Face name table for arch {arch!r}; known: "
                               f"{sorted(FAMILIES)}")
    return FAMILIES[arch]


def model_type(name) -> ModelType:
    """The ModelType of config.json's model_type `name`."""
    if name not in MODEL_TYPES:
        raise GlassformerError(f"model_type {name!r} is not one glassformer loads "
                               f"(supported: {', '.join(MODEL_TYPES)})")
    return MODEL_TYPES[name]
