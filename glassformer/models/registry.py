"""Model families by name: each is a module with a Config, init_params, forward and backward.

Training, generation and loading use a family through this one table, so they work for every
decoder family without naming it.
"""
from __future__ import annotations

import importlib
from types import ModuleType

from glassformer.errors import GlassformerError

# arch name -> (module, config class name)
FAMILIES = {
    "gpt2": ("glassformer.models.gpt2", "GPT2Config"),
    "llama": ("glassformer.models.llama", "LlamaConfig"),
    "bert": ("glassformer.models.bert", "BertConfig"),
}


def family(arch: str) -> ModuleType:
    """The module of architecture `arch` ("gpt2", "llama", "bert")."""
    if arch not in FAMILIES:
        raise GlassformerError(f"unknown architecture {arch!r}; known: {sorted(FAMILIES)}")
    return importlib.import_module(FAMILIES[arch][0])


def config_from_dict(data: dict):
    """Rebuild a config saved with `config.to_dict()` (its "arch" key picks the family)."""
    arch = data.get("arch")
    if arch is None:
        raise GlassformerError("model config has no 'arch' key (expected gpt2, llama or bert)")
    module = family(arch)
    return getattr(module, FAMILIES[arch][1]).from_dict(data)


def arch_of(cfg) -> str:
    """The arch name of a config object."""
    return cfg.to_dict()["arch"]
