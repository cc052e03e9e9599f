"""The operands of a decoded step, gathered once: what blocks/decode_step.py reads per layer.

A decoded token is a few milliseconds of products (the weights streamed from memory) and, around
them, Python: splitting the params into layers (hundreds of names), finding each packed q|k|v
and gate|up array (blocks/packed.py), looking biases up by name. Done at every token, that
Python costs about as much as the attention over the cache; none of it changes between tokens.
So the first decoded step of a cache gathers it into a `DecodePlan`, one `LayerOperands` per
layer, and keeps it on the cache (`KVCache.decode_plan`): generation state, next to the keys and
values it decodes with. Each later step checks that the params are still the same arrays under
the same names (`params_key`, a tuple of ids: a few microseconds) and reuses the plan; any
change (a weight replaced, an adapter added) builds a new one.

The plan holds the arrays themselves (views into the params, never copies), so a weight changed
in place is seen at once, as it is on the ordinary path.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from glassformer.blocks.kv_cache import KVCache
from glassformer.blocks.lora import has_adapters
from glassformer.blocks.packed import packed_whole


class LayerOperands(NamedTuple):
    """One layer's weights for the decoded step, by role. A bias or norm shift the layer does
    not have is None. qkv / gate_up: the packed array the parts are column blocks of
    (models/layout.py), or the record over the GGUF blocks they are stacked rows of
    (blocks/packed.py), or None: then the parts are multiplied one by one."""
    norm1_w: np.ndarray
    norm1_b: np.ndarray | None
    qkv: np.ndarray | None            # (C, (H + 2K) D) when packed
    wq: np.ndarray                    # (C, H D)
    wk: np.ndarray                    # (C, K D)
    wv: np.ndarray                    # (C, K D)
    bq: np.ndarray | None
    bk: np.ndarray | None
    bv: np.ndarray | None
    wo: np.ndarray                    # (H D, C)
    bo: np.ndarray | None
    norm2_w: np.ndarray
    norm2_b: np.ndarray | None
    gate_up: np.ndarray | None        # (C, 2F) when packed (SwiGLU)
    w_gate: np.ndarray | None         # (C, F); None for a GELU MLP
    w_up: np.ndarray                  # (C, F)
    b_up: np.ndarray | None
    w_down: np.ndarray                # (F, C)
    b_down: np.ndarray | None
    down_t: np.ndarray | None         # w_down.T (C, F) when that view is C-contiguous float32
    #                                   (a checkpoint's (out, in) layout): the fused MLP end
    #                                   streams its rows (kernels/: swiglu_down_norm_rows)


class DecodePlan(NamedTuple):
    key: tuple                        # params_key of the params it was gathered from
    frozen: bool                      # the params hold adapters (blocks/lora.py)
    layers: tuple[LayerOperands, ...]
    whole: bool = False               # every layer's products can run inside one compiled call
    #                                   (`whole_layer`: kernels/decode_layer_numba.py)


def params_key(params: dict) -> tuple:
    """Which arrays under which names: equal keys mean the same params (the plan holds the
    arrays, so their ids cannot be reused while it lives)."""
    return tuple(params), tuple(map(id, params.values()))


def layer_operands(p: dict) -> LayerOperands:
    """One layer's block-local params (models/common.py: split_layers) -> its operands."""
    gate = p.get("mlp.w_gate")
    return LayerOperands(
        norm1_w=p["norm1.w"], norm1_b=p.get("norm1.b"),
        qkv=packed_whole([p["attn.wq"], p["attn.wk"], p["attn.wv"]]),
        wq=p["attn.wq"], wk=p["attn.wk"], wv=p["attn.wv"],
        bq=p.get("attn.bq"), bk=p.get("attn.bk"), bv=p.get("attn.bv"),
        wo=p["attn.wo"], bo=p.get("attn.bo"), norm2_w=p["norm2.w"], norm2_b=p.get("norm2.b"),
        gate_up=None if gate is None else packed_whole([gate, p["mlp.w_up"]]),
        w_gate=gate, w_up=p["mlp.w_up"], b_up=p.get("mlp.b_up"),
        w_down=p["mlp.w_down"], b_down=p.get("mlp.b_down"), down_t=rows_of(p["mlp.w_down"]))


def rows_of(w) -> np.ndarray | None:
    """w (F, C) -> its transpose (C, F), a view, when it lies C-contiguous in float32 (W's
    output rows one after the other); None otherwise (a QuantizedMatrix, a row-major w)."""
    t = getattr(w, "T", None)
    ok = isinstance(t, np.ndarray) and t.flags.c_contiguous and t.dtype == np.float32
    return t if ok else None


def one_unit_stride(w) -> bool:
    """Whether w is a float32 matrix with one unit stride, a layout NumPy hands BLAS as it is:
    row-major, or the transpose view of a row-major matrix (not a QuantizedMatrix)."""
    if not isinstance(w, np.ndarray) or w.dtype != np.float32 or w.ndim != 2:
        return False
    size, (first, second) = w.itemsize, w.strides
    return ((second == size and first >= size * w.shape[1])
            or (first == size and second >= size * w.shape[0]))


def whole_layer(op: LayerOperands) -> bool:
    """Whether a layer can run as one compiled call, products included (decode_numpy.layer_step
    and its twin): q | k | v packed, gate | up packed for a SwiGLU, every product matrix float32
    with one unit stride (kernels/blas_numba.py hands it to BLAS from the loop)."""
    up = op.gate_up if op.w_gate is not None else op.w_up
    return all(one_unit_stride(w) for w in (op.qkv, op.wo, up, op.w_down))


def decode_plan(params: dict, layers: list[dict], key: tuple | None = None) -> DecodePlan:
    """The plan of `params`, whose layers split_layers gave as `layers`."""
    operands = tuple(layer_operands(p) for p in layers)
    return DecodePlan(key=params_key(params) if key is None else key,
                      frozen=has_adapters(params), layers=operands,
                      whole=all(whole_layer(op) for op in operands))


def cached_plan(params: dict, cache: KVCache) -> DecodePlan | None:
    """The plan this cache keeps, when it was gathered from these very params; else None."""
    plan = cache.decode_plan
    if plan is None:
        return None
    return plan if plan.key == params_key(params) else None
