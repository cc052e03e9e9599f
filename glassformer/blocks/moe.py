"""The sparse mixture-of-experts MLP: a router picks k of E SwiGLU experts for every token.

    rows    = x reshaped                                  (B, T, C) -> (N, C), N = B T
    logits  = rows @ router                               (N, C) @ (C, E) -> (N, E)
    weights, chosen experts = router(logits)              (N, k), (N, k)   ops/moe_router.py
    slots   = the N k (token, expert) pairs, sorted by expert:
              expert 0's tokens | expert 1's tokens | ...   one contiguous run per expert
    out[s]  = expert_e(rows[token of s])                  one SwiGLU MLP product per expert
    y[n]    = sum over n's k slots of weight * out        (N, C) -> (B, T, C)
    y      += shared(x) [* sigmoid(x @ shared_gate)]      always-on shared expert, if any

Each expert is the LLaMA MLP of blocks/mlp.py (silu(x W_gate) * (x W_up)) W_down, run through
`mlp_forward` on its run of slots, so no MLP math is written twice. There is no loop over
tokens: one stable argsort groups the slots by expert, a loop over the E experts makes one
product each, and the combine puts the slots back in token order by one inverse permutation
(each token has exactly k slots, so (N k, C) -> (N, k, C) -> sum over k: no scatter-add).
The backward walks the same plan in reverse: dy gathered per slot, one backward per expert, the
slots' dx summed per token the same way.

Gradients (derivation: docs/derivations/moe.md). The experts' outputs are weighted, so
dweight[s] = <dy[token of s], out[s]>, and through the router (ops/moe_router.py) those reach the
router logits, hence the router matrix and x: top-k itself is piecewise constant, so only the
chosen scores get gradient. x fans out into the router, its k experts and the shared expert;
the three gradients are summed on one commented line.

Matches HF's `MixtralSparseMoeBlock`, `Qwen3MoeSparseMoeBlock`, `OlmoeSparseMoeBlock`,
`DeepseekV3MoE` (sigmoid scores, group-limited choice, correction bias, shared experts) and
`Qwen2MoeSparseMoeBlock` (sigmoid-gated shared expert) and `GptOssMLP` (a trained bias on the
router logits, `b_router`; experts with biases and the clamped SwiGLU of
ops/clamped_swiglu.py: moe.expert_mlp, moe.expert_bias). Training-time router jitter
(Mixtral's router_jitter_noise) is not implemented; HF's default is 0.

Params (block-local, under "mlp." in a layer): router (C, E), [router_bias (E,)],
[b_router (E,)], experts.w_up (E, C, F_e), experts.w_down (E, F_e, C), experts.w_gate
(E, C, F_e), [experts.b_up, experts.b_gate (E, F_e), experts.b_down (E, C)],
[shared.w_up (C, F_s), shared.w_down (F_s, C), shared.w_gate (C, F_s)], [shared_gate (C, 1)].
router_bias gets a zero gradient (it only chooses); DeepSeek-V3 moves it by its own rule.
The balance losses read the router through the ctx readers at the end of this file, and give
their gradient on the router logits back to `moe_backward(..., drouter_logits=...)`.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from glassformer.blocks.config import BlockConfig
from glassformer.blocks.mlp import MLPCtx, init_mlp, mlp_backward, mlp_forward, mlp_shapes
from glassformer.blocks.names import prefixed, sub_params
from glassformer.ops._check import check_float, check_shape
from glassformer.ops.activation import SigmoidCtx, sigmoid_backward, sigmoid_forward
from glassformer.ops.linear import LinearCtx, linear_backward, linear_forward
from glassformer.ops.moe_router import RouterCtx, router_backward, router_forward, router_scores



class Dispatch(NamedTuple):
    """Where each of the N k token-slots goes, slots sorted by expert.

    order:  (N k,) the token-major slot (n k + j) that sits at each sorted position.
    token:  (N k,) the token row of each sorted slot (order // k).
    bounds: (E + 1,) expert e's slots are sorted positions bounds[e]:bounds[e + 1].
    """
    order: np.ndarray
    token: np.ndarray
    bounds: np.ndarray


class SharedCtx(NamedTuple):
    mlp: MLPCtx                     # the shared expert over all N rows
    gate_proj: LinearCtx | None     # rows -> (N, 1) gate logit (Qwen2-MoE)
    gate: SigmoidCtx | None
    out: np.ndarray | None          # (N, C) the shared MLP's output, for the gate's gradient


class MoECtx(NamedTuple):
    shape: tuple[int, int, int]     # (B, T, C) of x
    router_proj: LinearCtx          # rows (N, C) -> logits (N, E)
    logits: np.ndarray              # (N, E) router logits, for the balance losses
    router: RouterCtx               # scores, chosen experts (N, k), normalisation
    weights: np.ndarray             # (N, k) the chosen experts' weights
    dispatch: Dispatch
    experts: list                   # [(expert id, MLPCtx)] for every expert given slots
    out: np.ndarray                 # (N k, C) each sorted slot's expert output, unweighted
    shared: SharedCtx | None
    has_bias: bool                  # the params held router_bias


def expert_config(cfg: BlockConfig, width: int, *, routed: bool = True) -> BlockConfig:
    """The dense MLP config of one routed expert (SwiGLU, or gpt-oss's clamped one with biases)
    or, routed=False, of the shared expert (SwiGLU), of hidden `width`."""
    kind = cfg.moe.expert_mlp if routed else "swiglu"
    return BlockConfig(d_model=cfg.d_model, n_head=1, d_ff=width, norm="rms", mlp=kind,
                       mlp_bias=routed and cfg.moe.expert_bias, glu_alpha=cfg.glu_alpha,
                       glu_limit=cfg.glu_limit)


def expert_names(cfg: BlockConfig) -> tuple[str, ...]:
    """The names of one routed expert's params, stacked (E, ...) under "experts."."""
    return tuple(mlp_shapes(expert_config(cfg, cfg.moe.expert_d_ff)))


def dispatch_plan(indices: np.ndarray, n_experts: int) -> Dispatch:
    """indices (N, k) -> the slots sorted by expert (stable: token order within an expert)."""
    flat = indices.reshape(-1)                                            # (N k,) token-major
    order = np.argsort(flat, kind="stable")                               # (N k,)
    counts = np.bincount(flat, minlength=n_experts)                       # (E,)
    bounds = np.concatenate(([0], np.cumsum(counts)))                     # (E + 1,)
    return Dispatch(order, order // indices.shape[1], bounds)


def combine(slots: np.ndarray, dispatch: Dispatch, k: int) -> np.ndarray:
    """Sorted slots (N k, C) -> the sum of each token's k slots (N, C).

    The inverse permutation puts the slots back token-major, where a token's k slots are
    adjacent: a reshape and a sum over k, no scatter-add."""
    token_major = np.empty_like(slots)
    token_major[dispatch.order] = slots                                   # (N k, C) token-major
    return token_major.reshape(-1, k, slots.shape[-1]).sum(axis=1)        # (N, k, C) -> (N, C)


def moe_forward(params: dict, x: np.ndarray, cfg: BlockConfig, *, inference: bool = False
                ) -> tuple[np.ndarray, MoECtx]:
    """x (B, T, C) -> y (B, T, C); cfg.moe holds the options. inference: no backward follows."""
    moe = cfg.moe
    check_shape("x", check_float("x", x), ("B", "T", "C"), {"C": cfg.d_model})
    b, t, c = x.shape
    k = moe.experts_per_token
    rows = x.reshape(-1, c)                                               # (B, T, C) -> (N, C)
    logits, router_proj = linear_forward(rows, params["router"],
                                         params.get("b_router"))          # (N, C) -> (N, E)
    weights, router = router_forward(
        logits, params.get("router_bias"), top_k=k, scoring=moe.scoring,
        norm_topk_prob=moe.norm_topk_prob, scaling=moe.routed_scaling_factor,
        n_group=moe.n_group, topk_group=moe.topk_group)                   # (N, k)
    dispatch = dispatch_plan(router.indices, moe.n_experts)
    slot_rows = rows[dispatch.token]                                      # (N k, C), by expert
    out = np.empty_like(slot_rows)                                        # (N k, C)
    ecfg = expert_config(cfg, moe.expert_d_ff)
    experts = []
    for e in range(moe.n_experts):
        lo, hi = dispatch.bounds[e], dispatch.bounds[e + 1]
        if lo == hi:
            continue  # no token chose this expert
        expert_params = {name: params[f"experts.{name}"][e] for name in expert_names(cfg)}
        y_e, ctx_e = mlp_forward(expert_params, slot_rows[None, lo:hi], ecfg,
                                 inference=inference)                     # (1, n_e, C)
        out[lo:hi] = y_e[0]
        experts.append((e, ctx_e))
    slot_weights = weights.reshape(-1)[dispatch.order]                    # (N k,) sorted
    y = combine(out * slot_weights[:, None], dispatch, k)                 # (N, C)
    shared = None
    if moe.shared_d_ff:
        shared_y, shared = _shared_forward(params, rows, cfg, inference)
        y = y + shared_y
    ctx = MoECtx((b, t, c), router_proj, logits, router, weights, dispatch, experts, out,
                 shared, "router_bias" in params)
    return y.reshape(b, t, c), ctx                                        # (N, C) -> (B, T, C)


def _shared_forward(params: dict, rows: np.ndarray, cfg: BlockConfig, inference: bool
                    ) -> tuple[np.ndarray, SharedCtx]:
    """The always-on shared expert over rows (N, C) -> (N, C), gated by a sigmoid if asked."""
    scfg = expert_config(cfg, cfg.moe.shared_d_ff, routed=False)
    shared_y, mlp_ctx = mlp_forward(sub_params(params, "shared."), rows[None], scfg,
                                    inference=inference)                  # (1, N, C)
    shared_y = shared_y[0]                                                # (N, C)
    if not cfg.moe.shared_gate:
        return shared_y, SharedCtx(mlp_ctx, None, None, None)
    gate_logit, gate_proj = linear_forward(rows, params["shared_gate"])   # (N, C) -> (N, 1)
    gate, gate_ctx = sigmoid_forward(gate_logit)                          # (N, 1)
    return shared_y * gate, SharedCtx(mlp_ctx, gate_proj, gate_ctx, shared_y)


def moe_backward(dy: np.ndarray, ctx: MoECtx, *, drouter_logits: np.ndarray | None = None
                 ) -> tuple[dict, np.ndarray]:
    """dy (B, T, C) -> (grads under the forward's param names, dx (B, T, C)).

    drouter_logits (N, E): a gradient on the router logits from a loss that reads them (the
    balance losses), added to the routing path's own."""
    b, t, c = ctx.shape
    k = ctx.weights.shape[1]
    dy_rows = dy.reshape(-1, c)                                           # (N, C)
    dslots = dy_rows[ctx.dispatch.token]                                  # (N k, C), by expert
    # y = sum_s weight_s out_s: the weight's gradient is <dy, out>, out's is weight * dy
    dslot_weights = np.vecdot(dslots, ctx.out)                            # (N k,)
    dweights = np.empty_like(dslot_weights)
    dweights[ctx.dispatch.order] = dslot_weights                          # back to token-major
    slot_weights = ctx.weights.reshape(-1)[ctx.dispatch.order]            # (N k,)
    dslots *= slot_weights[:, None]                                       # d out (N k, C)
    grads, dslot_rows = _experts_backward(dslots, ctx)
    dx_experts = combine(dslot_rows, ctx.dispatch, k)                     # (N, C)
    dlogits, dbias = router_backward(dweights.reshape(-1, k), ctx.router)  # (N, E)
    if drouter_logits is not None:
        dlogits = dlogits + drouter_logits  # fan-out: the logits fed the router and that loss
    dx_router, grads["router"], db_router = linear_backward(dlogits, ctx.router_proj)
    if db_router is not None:
        grads["b_router"] = db_router
    if ctx.has_bias:
        grads["router_bias"] = dbias
    dx = dx_experts + dx_router  # fan-out: x fed its k experts and the router
    if ctx.shared is not None:
        shared_grads, dx_shared = _shared_backward(dy_rows, ctx.shared)
        grads.update(shared_grads)
        dx = dx + dx_shared  # fan-out: x fed the shared expert too
    return grads, dx.reshape(b, t, c)


def _experts_backward(dslots: np.ndarray, ctx: MoECtx) -> tuple[dict, np.ndarray]:
    """d out (N k, C) sorted -> (stacked expert grads, d slot rows (N k, C) sorted). An expert
    no token chose gets zero gradients."""
    n_experts = len(ctx.dispatch.bounds) - 1
    grads = {}
    dslot_rows = np.empty_like(dslots)
    for e, ctx_e in ctx.experts:
        lo, hi = ctx.dispatch.bounds[e], ctx.dispatch.bounds[e + 1]
        grads_e, dx_e = mlp_backward(dslots[None, lo:hi], ctx_e)
        dslot_rows[lo:hi] = dx_e[0]                   # every sorted slot belongs to one expert
        for name, grad in grads_e.items():            # every expert's params share shapes
            if f"experts.{name}" not in grads:
                grads[f"experts.{name}"] = np.zeros((n_experts,) + grad.shape, dslots.dtype)
            grads[f"experts.{name}"][e] = grad
    return grads, dslot_rows


def _shared_backward(dy_rows: np.ndarray, ctx: SharedCtx) -> tuple[dict, np.ndarray]:
    """dy (N, C) -> (grads of shared.* and shared_gate, dx (N, C))."""
    grads = {}
    dshared = dy_rows
    dx_gate = None
    if ctx.gate is not None:
        dgate = np.vecdot(dy_rows, ctx.out)[:, None]                      # (N, 1)
        dgate_logit = sigmoid_backward(dgate, ctx.gate)
        dx_gate, grads["shared_gate"], _ = linear_backward(dgate_logit, ctx.gate_proj)
        dshared = dy_rows * ctx.gate.out
    mlp_grads, dx = mlp_backward(dshared[None], ctx.mlp)
    grads.update(prefixed(mlp_grads, "shared."))
    if dx_gate is not None:
        return grads, dx[0] + dx_gate  # fan-out: x fed the shared expert and its gate
    return grads, dx[0]


def moe_shapes(cfg: BlockConfig) -> dict[str, tuple[int, ...]]:
    """Param names and shapes of one MoE block, in the order init_moe draws them."""
    moe, c = cfg.moe, cfg.d_model
    shapes = {"router": (c, moe.n_experts)}                               # (C, E)
    if moe.router_bias:
        shapes["router_bias"] = (moe.n_experts,)                          # (E,)
    if moe.router_logit_bias:
        shapes["b_router"] = (moe.n_experts,)                             # (E,)
    expert = mlp_shapes(expert_config(cfg, moe.expert_d_ff))              # w_up, w_down, w_gate
    shapes.update({f"experts.{name}": (moe.n_experts,) + shape for name, shape in expert.items()})
    if moe.shared_d_ff:
        shared = expert_config(cfg, moe.shared_d_ff, routed=False)
        shapes.update(prefixed(mlp_shapes(shared), "shared."))
    if moe.shared_gate:
        shapes["shared_gate"] = (c, 1)                                    # (C, 1)
    return shapes


def init_moe(cfg: BlockConfig, rng: np.random.Generator, *, std: float, out_std: float,
             dtype=np.float32) -> dict:
    """Normal(0, std) weights, Normal(0, out_std) for the down projections (they write into the
    residual); a zero router_bias. Drawn in moe_shapes' order (init_mlp's for the shared one)."""
    moe = cfg.moe
    shapes = moe_shapes(cfg)
    params = {"router": (rng.standard_normal(shapes["router"]) * std).astype(dtype)}
    if moe.router_bias:
        params["router_bias"] = np.zeros(shapes["router_bias"], dtype)
    if moe.router_logit_bias:
        params["b_router"] = np.zeros(shapes["b_router"], dtype)
    for name in expert_names(cfg):
        shape = shapes[f"experts.{name}"]
        if name.startswith("b"):                                          # expert biases
            params[f"experts.{name}"] = np.zeros(shape, dtype)
            continue
        scale = out_std if name == "w_down" else std
        params[f"experts.{name}"] = (rng.standard_normal(shape) * scale).astype(dtype)
    if moe.shared_d_ff:
        shared = init_mlp(expert_config(cfg, moe.shared_d_ff, routed=False), rng, std=std,
                          out_std=out_std, dtype=dtype)
        params.update(prefixed(shared, "shared."))
    if moe.shared_gate:
        params["shared_gate"] = (rng.standard_normal(shapes["shared_gate"]) * std).astype(dtype)
    return params


# ---------------------------------------------------------------- reading an MoE block's ctx
# What the balance losses, the viewer and explain read off a forward, by name.

def router_logits(ctx: MoECtx) -> np.ndarray:
    """(N, E) router logits, N = B T in row-major (b, t) order."""
    return ctx.logits


def router_probs(ctx: MoECtx) -> np.ndarray:
    """(N, E) router scores: softmax probabilities (or sigmoid scores, DeepSeek-V3)."""
    return router_scores(ctx.router)


def chosen_experts(ctx: MoECtx) -> np.ndarray:
    """(N, k) int64, each token's chosen experts, best first."""
    return ctx.router.indices


def chosen_weights(ctx: MoECtx) -> np.ndarray:
    """(N, k) the weights the chosen experts' outputs were summed with."""
    return ctx.weights


def expert_load(ctx: MoECtx) -> np.ndarray:
    """(E,) float64, the fraction of the N k token-slots each expert received."""
    counts = np.diff(ctx.dispatch.bounds)
    return counts / float(counts.sum())


def moe_output(ctx: MoECtx) -> np.ndarray:
    """The block's output y (B, T, C), rebuilt from what the ctx keeps (the weighted combine of
    the saved expert outputs, plus the shared expert's saved or recomputed output)."""
    k = ctx.weights.shape[1]
    slot_weights = ctx.weights.reshape(-1)[ctx.dispatch.order]
    y = combine(ctx.out * slot_weights[:, None], ctx.dispatch, k)         # (N, C)
    if ctx.shared is not None:
        down = ctx.shared.mlp.down
        shared_y, _ = linear_forward(down.x, down.w)                      # (1, N, F_s) -> C
        shared_y = shared_y[0]
        if ctx.shared.gate is not None:
            shared_y = shared_y * ctx.shared.gate.out
        y = y + shared_y
    return y.reshape(ctx.shape)
