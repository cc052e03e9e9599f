"""Family: the record that names everything one model family provides, and the config <-> dict
helpers every family's config shares.

Each family module (gpt2.py, llama.py, bert.py) ends with one `FAMILY = Family(...)`. `Model`,
training, generation and loading reach a family only through this record (models/registry.py
lists them), so a reader can follow a call from `Model.forward` straight into the family module.

    FAMILY.param_shapes(cfg)      {name: shape}: the one place names and shapes live; init draws
                                  from it, loading checks files against it, export writes it
    FAMILY.init_params(cfg, rng)  {name: array}, same names in the same order
    FAMILY.forward(params, ids, cfg, ...) -> (out, ctx);  FAMILY.backward(dout, ctx) -> grads

A family's config is a frozen dataclass that subclasses `FamilyConfig` (to_dict / from_dict, the
same for all) and starts its __post_init__ with `check_config_values` and `check_sizes`.
"""
from __future__ import annotations

import math
import numbers
import typing
from dataclasses import asdict, dataclass, fields
from typing import Callable

from glassformer.errors import GlassformerError

# What a family's forward computes, for the generic code that must know (Family.kind):
CAUSAL = "causal"                    # ids -> next-token logits; generates, has a KV cache
ENCODER = "encoder"                  # ids -> one vector per token, read both ways (BERT)
ENCODER_DECODER = "encoder-decoder"  # (source, target input) -> target logits (the paper's)
KINDS = (CAUSAL, ENCODER, ENCODER_DECODER)
# The sizes every family's config has, each at least 1 (V, T_max, L, H, C)
SIZES = ("vocab_size", "max_seq_len", "n_layer", "n_head", "d_model")


@dataclass(frozen=True)
class Family:
    """One model family: its config class and its functions."""
    name: str                         # the arch name configs carry ("gpt2", "llama", "bert")
    kind: str                         # CAUSAL, ENCODER or ENCODER_DECODER (above)
    config: type                      # the frozen config dataclass (has ARCH == name)
    init_params: Callable             # (cfg, rng) -> params
    forward: Callable                 # (params, ids, cfg, **options) -> (out, ctx)
    backward: Callable                # (dout, ctx) -> grads, same keys as params
    param_shapes: Callable            # cfg -> {name: shape}, in init's order
    kv_layout: Callable | None        # cfg -> KVLayout(heads, key_dim, value_dim) of its KV cache
                                      # (blocks/kv_cache.py; MLA: (1, R, Dr)); None: no cache
    sliding_context: bool             # past the context, generation slides a window (learned
                                      # positions) instead of stopping
    windows: Callable | None = None   # cfg -> each layer's sliding attention window W, or None
                                      # where it attends to every key (None: no layer slides)
    new_cache: Callable | None = None   # (cfg, batch, max_len, dtype) -> its own cache, for a
                                        # family whose cache is not one KVCache of L layers
                                        # (a hybrid's: blocks/delta_state.py); None: KVCache
    cache_bytes: Callable | None = None  # (cfg, batch, max_len, dtype) -> that cache's bytes


def _value_problem(value, hint) -> str | None:
    """Why `value` does not fit the annotation `hint` (int, float, bool, str, X | None,
    tuple[int, ...]), or None.

    note: a bool is an int to Python; a count of True layers is refused all the same, and so is a
    float where an int belongs (2.0 heads) or a float that is not finite (1e400 reads as inf).
    """
    if typing.get_origin(hint) is tuple:   # tuple[int, ...]: a list of layer indices
        items_fit = isinstance(value, (tuple, list)) and all(
            isinstance(item, numbers.Integral) and not isinstance(item, bool) for item in value)
        return None if items_fit else f"must be a list of integers, got {value!r}"
    allowed = typing.get_args(hint) or (hint,)
    if value is None:
        return None if type(None) in allowed else "must be set, got None"
    if isinstance(value, bool):
        return None if bool in allowed else f"must be a number, got the boolean {value}"
    if int in allowed and isinstance(value, numbers.Integral):
        return None
    if float in allowed and isinstance(value, numbers.Real):
        return None if math.isfinite(value) else f"must be a finite number, got {value}"
    if str in allowed and isinstance(value, str):
        return None
    names = " or ".join(kind.__name__ for kind in allowed if kind is not type(None))
    return f"must be {'an ' if names.startswith('int') else 'a '}{names}, got {value!r}"


def check_field_values(cls: type, values: dict, name_of=None) -> None:
    """Raise a GlassformerError naming the first of `values` that does not fit its field's type
    in the dataclass `cls` (keys that are not fields are left to the caller). name_of(field): how
    the error names a field (default "Class field"; a command's flag, e.g. "--lr")."""
    hints = typing.get_type_hints(cls)
    for field in fields(cls):
        if field.name in values:
            problem = _value_problem(values[field.name], hints[field.name])
            if problem:
                name = f"{cls.__name__} {field.name}" if name_of is None else name_of(field.name)
                raise GlassformerError(f"{name} {problem}")


def check_config_values(cfg) -> None:
    """check_field_values on a config's own fields. Each config's __post_init__ calls this
    first, so the range checks after it compare numbers."""
    check_field_values(type(cfg), {field.name: getattr(cfg, field.name) for field in fields(cfg)})


def check_sizes(cfg, names: tuple[str, ...] = SIZES) -> None:
    """Raise a GlassformerError naming the first of these fields that is below 1 (after
    check_config_values, so they are numbers)."""
    for name in names:
        if getattr(cfg, name) < 1:
            raise GlassformerError(f"{name} must be at least 1, got {getattr(cfg, name)}")


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


class FamilyConfig:
    """What every family's config class shares (it subclasses this; it holds no fields)."""

    def to_dict(self) -> dict:
        """{"arch": ARCH, field: value, ...}: plain, JSON-ready data (config_to_dict)."""
        return config_to_dict(self)

    @classmethod
    def from_dict(cls, data: dict):
        """The config that `to_dict` wrote; unknown keys are errors (config_from_dict)."""
        return config_from_dict(cls, data)
