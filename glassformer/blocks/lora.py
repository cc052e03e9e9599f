"""LoRA adapters inside the blocks: their param names, and reading one out of a param dict.

An adapter sits beside the weight it adapts, under the weight's own name plus a suffix:

    blocks.3.attn.wq               (C, H*D)   the base weight, frozen in a LoRA run
    blocks.3.attn.wq.lora_A        (C, r)     trained
    blocks.3.attn.wq.lora_B        (r, H*D)   trained
    blocks.3.attn.wq.lora_scale    ()         s = alpha / r (or alpha / sqrt(r)), a constant
    blocks.3.attn.wq.lora_dropout  ()         p of the dropout on the adapter's input, a constant

The two constants are float64 0-d arrays so that every entry of a param dict stays an array (the
training loop ships `frozen` weights to its ranks as arrays); they are read with float(), so they
never promote a float32 product. A LoRA run trains the `lora_A`/`lora_B` entries and passes the
base weights and the constants as `frozen` (train/objectives/objective.py).

The weights that can carry an adapter are the linear layers of the blocks: attention's wq, wk, wv,
wo and the MLP's w_up, w_gate, w_down, plus "attn.wqkv", one adapter over the joined q|k|v
product (GPT-2's fused c_attn: blocks/qkv.py). PEFT's module names for them (q_proj, c_attn,
query, ...) are io/peft.py's business.

Frozen base. When any adapter is present (`has_adapters`), the model is a LoRA model and every
base weight is frozen, as PEFT freezes the base model: the stack of layers runs each linear with
`frozen=True` (ops/linear.py: no dW, and x not kept for it), adapted ones through ops/lora.py
(blocks/projection.py picks which), and the block backwards return grads for the adapters only
(plus the norms' small grads, which the family drops with `adapter_grads`).
"""
from __future__ import annotations

from itertools import repeat
from typing import NamedTuple

import numpy as np

LORA_A = "lora_A"               # (C_in, r)
LORA_B = "lora_B"               # (r, C_out)
LORA_SCALE = "lora_scale"       # 0-d: s
LORA_DROPOUT = "lora_dropout"   # 0-d: p
TRAINED_SUFFIXES = ("." + LORA_A, "." + LORA_B)


class Adapter(NamedTuple):
    """One weight's adapter, as the projection reads it."""
    a: np.ndarray       # (C_in, r)
    b: np.ndarray       # (r, C_out)
    scale: float
    dropout: float


def adapter_name(weight: str, part: str) -> str:
    """The param name of one part of the adapter on `weight`.

    >>> adapter_name("blocks.3.attn.wq", LORA_A)
    'blocks.3.attn.wq.lora_A'
    """
    return f"{weight}.{part}"


def is_adapter_key(name: str) -> bool:
    """True for a trained adapter entry (lora_A or lora_B)."""
    return name.endswith(TRAINED_SUFFIXES)


def adapted_weight(name: str) -> str:
    """'blocks.3.attn.wq.lora_A' -> 'blocks.3.attn.wq' (the weight the entry belongs to)."""
    return name.rsplit(".", 1)[0]


def has_adapters(params: dict) -> bool:
    """Whether these params hold any adapter: then the model's base weights are frozen."""
    return any(map(str.endswith, params, repeat(TRAINED_SUFFIXES)))   # at every decoded token


def adapter_of(params: dict, weight: str) -> Adapter | None:
    """The adapter on `weight` (a name in `params`' own name space), or None."""
    a = params.get(adapter_name(weight, LORA_A))
    if a is None:
        return None
    return Adapter(a=a, b=params[adapter_name(weight, LORA_B)],
                   scale=float(params[adapter_name(weight, LORA_SCALE)]),
                   dropout=float(params[adapter_name(weight, LORA_DROPOUT)]))


def adapter_constants(weight: str, scale: float, dropout: float) -> dict:
    """The two frozen constants of the adapter on `weight`, as 0-d float64 arrays."""
    return {adapter_name(weight, LORA_SCALE): np.array(float(scale)),
            adapter_name(weight, LORA_DROPOUT): np.array(float(dropout))}


def adapter_grads(grads: dict) -> dict:
    """Only the adapters' grads: what a LoRA model's backward returns."""
    return {key: value for key, value in grads.items() if is_adapter_key(key)}
