"""The position-wise feed-forward block, plain or gated.

    plain (GPT-2, BERT, original):  y = act(x W_up + b_up) W_down + b_down
                                    (act: GELU, tanh GELU, ReLU, or SiLU: Marian's "swish")
    gated (LLaMA, Qwen2):           y = (silu(x W_gate) * (x W_up)) W_down        (SwiGLU)

x (B, T, C) -> hidden (B, T, F) -> y (B, T, C). In the gated form x feeds two projections, so its
gradient is the sum of both paths, on one visible line in the backward. When the two weights lie
packed side by side (blocks/packed.py: a loaded model's layout) one product computes both.
Each projection adds its LoRA adapter when the params hold one (blocks/projection.py).
"""
from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from glassformer.blocks.config import BlockConfig
from glassformer.blocks.lora import adapter_of
from glassformer.blocks.packed import packed_whole
from glassformer.blocks.projection import (init_projections, projection_backward,
                                           projection_forward)
from glassformer.kernels.choice import prefill_kernels, train_kernels
from glassformer.ops._check import check_float, check_shape
from glassformer.ops.activation import (gelu_backward, gelu_forward, relu_backward,
                                        relu_forward, silu_backward, silu_forward)
from glassformer.ops.linear import LinearCtx, linear_forward
from glassformer.ops.lora import LoraLinearCtx
from glassformer.ops.clamped_swiglu import clamped_swiglu_backward, clamped_swiglu_forward
from glassformer.ops.geglu import geglu_backward, geglu_forward
from glassformer.ops.swiglu import swiglu_backward, swiglu_forward


GATED = ("swiglu", "geglu_tanh", "swiglu_clamped")   # with a gate: act(x W_gate) * x W_up


class MLPCtx(NamedTuple):
    kind: str                 # cfg.mlp
    up: LinearCtx | LoraLinearCtx             # x -> (B, T, F)
    gate: LinearCtx | LoraLinearCtx | None    # x -> (B, T, F), gated form only
    act: Any                                  # ctx of the activation (or of swiglu;
                                              # None: inference on the compiled path)
    down: LinearCtx | LoraLinearCtx           # (B, T, F) -> (B, T, C)


def _activation_forward(kind: str, h: np.ndarray, inference: bool):
    if kind == "relu":
        return relu_forward(h)
    if kind == "silu":
        return silu_forward(h)
    # the tanh form on float32 has a compiled kernel (kernels/train_numba.py): out and slope in
    # one pass instead of 13 (train_kernels is None on the NumPy path)
    compiled = train_kernels() if kind == "gelu_tanh" else None
    forward = gelu_forward if compiled is None else compiled.gelu_forward
    return forward(h, approximate="tanh" if kind == "gelu_tanh" else "none",
                   keep_slope=not inference)


def _activation_backward(kind: str, dout: np.ndarray, ctx) -> np.ndarray:
    """d(activation input), given dout: a fresh product that mlp_backward owns, which the GELU
    overwrites (no new (B, T, F) array, one pass)."""
    if kind == "relu":
        return relu_backward(dout, ctx)
    if kind == "silu":
        return silu_backward(dout, ctx)
    return gelu_backward(dout, ctx, out=dout)


def _gate_and_up(params: dict, x: np.ndarray, options: dict):
    """(x W_gate, x W_up, their ctxs): one product when the two lie packed side by side
    (blocks/packed.py) with no bias or adapter, its ctx then given as each part's (the same x,
    that part's weight: what a product of its own returns), so the backward is unchanged."""
    plain = "b_up" not in params and all(adapter_of(params, name) is None
                                         for name in ("w_gate", "w_up"))
    whole = packed_whole([params["w_gate"], params["w_up"]]) if plain else None
    if whole is not None:
        both, ctx = linear_forward(x, whole, frozen=options["frozen"])   # (B, T, 2F)
        width = params["w_gate"].shape[1]
        gate, up = both[..., :width], both[..., width:]                  # (B, T, F) views
        return gate, up, ctx._replace(w=params["w_gate"]), ctx._replace(w=params["w_up"])
    up, up_ctx = projection_forward(params, "w_up", "b_up", x, **options)      # (B, T, F)
    gate, gate_ctx = projection_forward(params, "w_gate", "b_gate", x, **options)  # (B, T, F)
    return gate, up, gate_ctx, up_ctx


def mlp_forward(params: dict, x: np.ndarray, cfg: BlockConfig, *, inference: bool = False,
                frozen: bool = False, train: bool = False,
                rng: np.random.Generator | None = None) -> tuple[np.ndarray, MLPCtx]:
    """params: w_up (C, F), w_down (F, C), [w_gate (C, F)], [b_up (F,), b_down (C,)], and any
    LoRA adapters on them ("w_up.lora_A", ...).

    inference: no backward will follow (cached generation), so GELU keeps no slope.
    frozen: the base weights take no gradient (a LoRA model). train, rng: LoRA dropout only."""
    check_shape("x", check_float("x", x), ("B", "T", "C"), {"C": cfg.d_model})
    options = dict(frozen=frozen, train=train, rng=rng)
    gate_ctx = None
    if cfg.mlp in GATED:
        gate, up, gate_ctx, up_ctx = _gate_and_up(params, x, options)    # (B, T, F) each
        kernels = prefill_kernels() if inference and cfg.mlp == "swiglu" else None
        if kernels is not None:   # no backward follows: one compiled pass, no ctx
            hidden, act_ctx = kernels.swiglu_rows(gate, up), None        # (B, T, F)
        elif cfg.mlp == "swiglu":
            compiled = train_kernels()            # one compiled pass (kernels/train_numba.py)
            forward = swiglu_forward if compiled is None else compiled.swiglu_forward
            hidden, act_ctx = forward(gate, up)                          # (B, T, F)
        elif cfg.mlp == "swiglu_clamped":                                # gpt-oss's experts
            hidden, act_ctx = clamped_swiglu_forward(gate, up, alpha=cfg.glu_alpha,
                                                     limit=cfg.glu_limit)
        else:                                                            # Gemma's GeGLU
            hidden, act_ctx = geglu_forward(gate, up, inference=inference)
    else:
        up, up_ctx = projection_forward(params, "w_up", "b_up", x, **options)  # -> (B, T, F)
        hidden, act_ctx = _activation_forward(cfg.mlp, up, inference)    # (B, T, F)
    y, down_ctx = projection_forward(params, "w_down", "b_down", hidden, **options)  # (B, T, C)
    return y, MLPCtx(cfg.mlp, up_ctx, gate_ctx, act_ctx, down_ctx)


def mlp_backward(dy: np.ndarray, ctx: MLPCtx) -> tuple[dict, np.ndarray]:
    """Returns (grads with the forward's param names, dx)."""
    dhidden, grads, db_down = projection_backward(dy, ctx.down, "w_down")   # (B, T, F)
    if ctx.kind in GATED:
        compiled = train_kernels()
        gated_backward = {"swiglu": swiglu_backward if compiled is None
                          else compiled.swiglu_backward, "geglu_tanh": geglu_backward,
                          "swiglu_clamped": clamped_swiglu_backward}[ctx.kind]
        dgate, dup = gated_backward(dhidden, ctx.act)
        dx_gate, gate_grads, db_gate = projection_backward(dgate, ctx.gate, "w_gate")
        grads.update(gate_grads)
        if db_gate is not None:
            grads["b_gate"] = db_gate
    else:
        dup = _activation_backward(ctx.kind, dhidden, ctx.act)
    dx, up_grads, db_up = projection_backward(dup, ctx.up, "w_up")
    grads.update(up_grads)
    if ctx.kind in GATED:
        dx = dx + dx_gate  # fan-out: x fed both the gate and the up projection
    if db_up is not None:
        grads["b_up"] = db_up
    if db_down is not None:
        grads["b_down"] = db_down
    return grads, dx


def mlp_shapes(cfg: BlockConfig) -> dict[str, tuple[int, ...]]:
    """Param names and shapes of one MLP block, in the order init draws them."""
    c, f = cfg.d_model, cfg.hidden
    shapes = {"w_up": (c, f), "w_down": (f, c)}                           # (C, F), (F, C)
    if cfg.mlp in GATED:
        shapes["w_gate"] = (c, f)                                         # (C, F)
    if cfg.mlp_bias:
        shapes.update(b_up=(f,), b_down=(c,))
    if cfg.mlp_bias and cfg.mlp == "swiglu_clamped":
        shapes["b_gate"] = (f,)                                           # gpt-oss's experts
    return shapes


def init_mlp(cfg: BlockConfig, rng: np.random.Generator, *, std: float, out_std: float,
             dtype=np.float32) -> dict:
    """Normal(0, std) weights, Normal(0, out_std) for w_down, the projection back into the
    residual; zero biases. Draws w_up, w_down, w_gate in that order (mlp_shapes' order)."""
    return init_projections(mlp_shapes(cfg), rng, std=std, out_std=out_std, out_weight="w_down",
                            dtype=dtype)
