"""Family: the record that names everything one model family provides, and the config <-> dict
helpers every family's config shares.

Each family module (gpt2.py, llama.py, bert.py) ends with one `FAMILY = Family(...)`. `Model`,
training, generation and loading reach a family only through this record (models/registry.py
lists them), so a reader can follow a call from `Model.forward` straight into the family module.

    FAMILY.param_shapes(cfg)      {name: shape}: the one place names and shapes live; init draws
                                  from it, loading checks files against it, export writes it
    FAMILY.init_params(cfg, rng)  {name: array}, same names in the same order
    FAMILY.forward(params, ids, cfg, ...) -> (out, ctx);  FAMILY.backward(dout, ctx) -> grads
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Callable

from glassformer.errors import GlassformerError


@dataclass(frozen=True)
class Family:
    """One model family: its config class and its functions."""
    name: str                         # the arch name configs carry ("gpt2", "llama", "bert")
    config: type                      # the frozen config dataclass (has ARCH == name)
    init_params: Callable             # (cfg, rng) -> params
    forward: Callable                 # (params, ids, cfg, **options) -> (out, ctx)
    backward: Callable                # (dout, ctx) -> grads, same keys as params
    param_shapes: Callable            # cfg -> {name: shape}, in init's order
    kv_layout: Callable | None        # cfg -> (K, D) of its KV cache; None: an encoder, no cache
    sliding_context: bool             # past the context, generation slides a window (learned
                                      # positions) instead of stopping


def config_to_dict(cfg) -> dict:
    """A config as plain data: {"arch": cfg.ARCH, field: value, ...} (JSON-ready)."""
    return {"arch": cfg.ARCH, **asdict(cfg)}


def config_from_dict(cls: type, data: dict):
    """Rebuild a config of class `cls` from `config_to_dict`'s output; unknown keys are errors.

    A missing "arch" key is allowed (the caller already chose the class); a different one is not.
    """
    arch = data.get("arch", cls.ARCH)
    if arch != cls.ARCH:
        raise GlassformerError(f"config of arch {arch!r} given to {cls.__name__} "
                               f"(arch {cls.ARCH!r})")
    known = {field.name for field in fields(cls)}
    unknown = set(data) - known - {"arch"}
    if unknown:
        raise GlassformerError(f"unknown {cls.__name__} keys: {sorted(unknown)}")
    return cls(**{key: value for key, value in data.items() if key in known})
