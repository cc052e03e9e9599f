"""`explain moe`: the sparse Mixture-of-Experts MLP (blocks/moe.py) and its balance losses
(ops/load_balance.py, ops/router_z_loss.py).

The pair is the block itself, `moe_forward` / `moe_backward`, on a small softmax top-2 router over
four SwiGLU experts (Qwen3-MoE's routing), so the finite-difference check covers x, the router
and every expert. Every forward step is read off the block's ctx through its readers
(router_logits, router_probs, chosen_experts, chosen_weights, the dispatch plan, each expert's
saved output, moe_output). The balance losses read the same router logits and chosen experts;
their gradient, which the training objective hands to `moe_backward(..., drouter_logits=...)`,
gets its own float64 finite-difference check, shown as a step.
"""
from __future__ import annotations

import numpy as np

from glassformer.blocks.config import BlockConfig, MoEConfig
from glassformer.blocks.moe import (chosen_experts, chosen_weights, init_moe, moe_backward,
                                    moe_forward, moe_output, router_logits, router_probs)
from glassformer.blocks.names import prefixed, sub_params
from glassformer.explain.core import Pair, Part, Setup, normal, shape_of, step, with_common
from glassformer.gradcheck import gradcheck
from glassformer.ops.load_balance import expert_load, load_balance_backward, load_balance_forward
from glassformer.ops.router_z_loss import router_z_loss_forward

SIZES = {"batch": 1, "seq": 5, "d_model": 6}
N_EXPERTS, TOP_K, EXPERT_WIDTH = 4, 2, 3      # E, k, F_e: small enough to read every number
# Spread of the init: wide enough that the router clearly prefers some experts per token.
WEIGHT_STD = 0.6
PREFIX = "mlp."

TEXT = with_common({
    "en": {
        "title": "Mixture of Experts (blocks/moe.py)",
        "x": "Input x (B, T, C). The block works on its N = B*T token rows (N, C).",
        "router": "Router weights (C, E): one column per expert. Each token scores every expert.",
        "logits": "Router logits = rows @ router (N, E), kept in ctx for the balance losses.",
        "probs": "Scores = softmax(logits) over the E experts: how much the router likes each.",
        "chosen": "Top-k: each token keeps its k={k} best experts, best first. The others are "
                  "never run for this token: that is the sparsity.",
        "weights": "The chosen experts' scores (N, k), the weights their outputs are mixed "
                   "with (Qwen3-MoE: not renormalised to sum 1).",
        "slot_token": "Dispatch: the N*k (token, expert) slots sorted by expert. Each entry is "
                      "the token row of a slot; expert e owns slots bounds[e]:bounds[e+1].",
        "bounds": "Where each expert's run of slots starts and ends (E + 1 numbers).",
        "expert": "Expert {e} (a SwiGLU MLP) on its {count} token rows {tokens}: one matrix "
                  "product for all of them, no loop over tokens.",
        "expert_idle": "Expert {e}: no token chose it, so it does no work at all this time.",
        "y": "Combine: y[n] = sum over n's k slots of weight * expert output (B, T, C).",
        "load": "Load (E,): each expert's share of the routed slots. Even would be 1/E = {even}.",
        "mean_prob": "Mean router probability per expert (E,), over the tokens.",
        "aux_loss": "Auxiliary loss = E * sum(k * load * mean_prob) (transformers' "
                    "load_balancing_loss_func): k when perfectly even, larger when a few "
                    "experts get most tokens and most probability.",
        "z_loss": "Router z-loss (ST-MoE) = mean of logsumexp(logits)^2: keeps the logits small.",
        "drouter": "dL/drouter (C, E). It comes only through the k chosen weights of each "
                   "token: top-k is a step function, so which experts win carries no gradient.",
        "dw_down": "dL/d experts.w_down (E, F_e, C). An expert no token chose gets exactly 0.",
        "dx": "dL/dx (B, T, C): x fed the router and its k experts, so their gradients add up.",
        "daux_logits": "d aux / d logits (N, E): the counts (load) are a step function, so only "
                       "the mean probability carries gradient: E * load_e * k / N through the "
                       "softmax. It pushes down every token's probability of the busy experts. "
                       "Training adds coef times this to the router's logits gradient.",
        "aux_check": "Finite-difference check of the auxiliary loss alone (float64): relative "
                     "error of d aux / d logits.",
    },
    "zh": {
        "title": "混合专家 MoE（blocks/moe.py）",
        "x": "输入 x (B, T, C)。这个块按 N = B*T 个词元行 (N, C) 计算。",
        "router": "路由器权重 (C, E)：每个专家一列。每个词元给每个专家打分。",
        "logits": "路由 logits = rows @ router (N, E)，保存在 ctx 中，供负载均衡损失使用。",
        "probs": "分数 = 对 E 个专家做 softmax：路由器对每个专家的偏好程度。",
        "chosen": "Top-k：每个词元只留下最好的 k={k} 个专家，从好到差排列。其余专家对这个词元"
                  "根本不计算：这就是“稀疏”。",
        "weights": "被选中专家的分数 (N, k)，就是混合它们输出时用的权重（Qwen3-MoE：不重新"
                   "归一化为和为 1）。",
        "slot_token": "分派：N*k 个（词元, 专家）槽位按专家排序。每个数是该槽位对应的词元行；"
                      "专家 e 拥有 bounds[e]:bounds[e+1] 这一段槽位。",
        "bounds": "每个专家那一段槽位的起止位置（E + 1 个数）。",
        "expert": "专家 {e}（一个 SwiGLU MLP）处理它的 {count} 个词元行 {tokens}：一次矩阵乘法"
                  "算完，不对词元做循环。",
        "expert_idle": "专家 {e}：这次没有词元选它，所以它完全不计算。",
        "y": "合并：y[n] = 词元 n 的 k 个槽位上 权重 * 专家输出 之和 (B, T, C)。",
        "load": "负载 (E,)：每个专家分到的槽位比例。完全均匀时是 1/E = {even}。",
        "mean_prob": "每个专家的平均路由概率 (E,)，对词元取平均。",
        "aux_loss": "辅助损失 = E * sum(k * 负载 * 平均概率)（transformers 的 "
                    "load_balancing_loss_func）：完全均匀时等于 k，少数专家拿走大部分词元和"
                    "概率时会变大。",
        "z_loss": "路由 z-loss（ST-MoE）= logsumexp(logits)^2 的平均：让 logits 保持较小。",
        "drouter": "dL/drouter (C, E)。梯度只经过每个词元那 k 个被选中的权重：top-k 是阶梯函数，"
                   "“谁被选中”本身没有梯度。",
        "dw_down": "dL/d experts.w_down (E, F_e, C)。没有词元选中的专家，梯度恰好为 0。",
        "dx": "dL/dx (B, T, C)：x 同时流向路由器和它的 k 个专家，所以梯度相加。",
        "daux_logits": "d aux / d logits (N, E)：计数（负载）是阶梯函数，只有平均概率带梯度："
                       "E * 负载_e * k / N，再经过 softmax 反向。它压低每个词元对繁忙专家的概率。"
                       "训练时把 系数 × 它 加到路由 logits 的梯度上。",
        "aux_check": "单独对辅助损失做有限差分校验（float64）：d aux / d logits 的相对误差。",
    },
})


def block_config(d_model: int) -> BlockConfig:
    """The explained block: softmax top-2 over four SwiGLU experts of width 3."""
    moe = MoEConfig(n_experts=N_EXPERTS, experts_per_token=TOP_K, expert_d_ff=EXPERT_WIDTH)
    return BlockConfig(d_model=d_model, n_head=1, norm="rms", mlp="swiglu", mlp_bias=False,
                       moe=moe)


def _pair(cfg: BlockConfig) -> Pair:
    def forward(inputs):
        return moe_forward(sub_params(inputs, PREFIX), inputs["x"], cfg)

    def backward(dy, ctx):
        grads, dx = moe_backward(dy, ctx)
        return {"x": dx, **prefixed(grads, PREFIX)}

    return Pair(forward, backward)


def _inputs(options: dict, rng) -> Setup:
    cfg = block_config(options["d_model"])
    x = normal(rng, (options["batch"], options["seq"], options["d_model"]))      # (B, T, C)
    params = init_moe(cfg, rng, std=WEIGHT_STD, out_std=WEIGHT_STD)
    return Setup({"x": x, **prefixed(params, PREFIX)}, _pair(cfg), {"cfg": cfg})


def _balance(ctx) -> tuple:
    """The balance losses on this block's router: (aux, its ctx, z-loss), one layer (L = 1)."""
    logits = router_logits(ctx)[None]                                  # (N, E) -> (1, N, E)
    chosen = chosen_experts(ctx)[None]                                 # (N, k) -> (1, N, k)
    aux, aux_ctx = load_balance_forward(logits, chosen)
    z_loss, _ = router_z_loss_forward(logits)
    return aux, aux_ctx, z_loss


def _expert_steps(ctx) -> list:
    """One step per expert: its saved outputs, or a line saying nobody chose it."""
    steps = []
    bounds = ctx.dispatch.bounds
    for e in range(N_EXPERTS):
        lo, hi = int(bounds[e]), int(bounds[e + 1])
        if lo == hi:
            steps.append(step(TEXT, f"expert.{e}", np.zeros((0,)), "(0, C)", text="expert_idle",
                              e=e))
            continue
        tokens = ctx.dispatch.token[lo:hi].tolist()
        value = ctx.out[lo:hi]                                         # (n_e, C)
        steps.append(step(TEXT, f"expert.{e}", value,
                          f"swiglu_mlp_e(rows{tokens}): {shape_of(value)}  (ctx.out)",
                          text="expert", e=e, count=hi - lo, tokens=tokens))
    return steps


def _forward_steps(inputs, y, ctx, static):
    x, router = inputs["x"], inputs[PREFIX + "router"]
    logits, probs = router_logits(ctx), router_probs(ctx)
    chosen, weights = chosen_experts(ctx), chosen_weights(ctx)
    aux, aux_ctx, z_loss = _balance(ctx)
    load = expert_load(chosen[None], N_EXPERTS)[0]                     # (1, N, k) -> (E,)
    # P_e, read off the aux loss's ctx: its probabilities weighted by each row's 1 / N
    mean_prob = (aux_ctx.softmax.probs * aux_ctx.row_scale).sum(axis=(0, 1))  # (1, N, E) -> (E,)
    steps = [step(TEXT, "x", x, shape_of(x)),
             step(TEXT, "router", router, shape_of(router)),
             step(TEXT, "logits", logits, f"rows @ router: {shape_of(logits)}  (ctx.logits)"),
             step(TEXT, "probs", probs, f"softmax(logits): {shape_of(probs)}"),
             step(TEXT, "chosen", chosen, f"top-k(probs): {shape_of(chosen)}", k=TOP_K),
             step(TEXT, "weights", weights, f"probs[chosen]: {shape_of(weights)}"),
             step(TEXT, "slot_token", ctx.dispatch.token,
                  f"argsort(chosen, stable) // k: {shape_of(ctx.dispatch.token)}"),
             step(TEXT, "bounds", ctx.dispatch.bounds, "[0, cumsum(bincount(chosen))]")]
    steps += _expert_steps(ctx)
    return steps + [
        step(TEXT, "y", moe_output(ctx), f"sum_k weight * expert out: {shape_of(y)}"),
        step(TEXT, "load", load, f"bincount(chosen) / (N k): {shape_of(load)}",
             even=f"{1.0 / N_EXPERTS:.4f}"),
        step(TEXT, "mean_prob", mean_prob, f"mean over N of probs: {shape_of(mean_prob)}"),
        step(TEXT, "aux_loss", aux, "E * sum_e (k load_e) * mean_prob_e: ()"),
        step(TEXT, "z_loss", z_loss, "mean_n logsumexp(logits_n)^2: ()")]


def aux_check(ctx) -> float:
    """Relative error of the auxiliary loss's backward against float64 central differences,
    on this forward's router logits and chosen experts."""
    chosen = chosen_experts(ctx)[None]                                 # (1, N, k)

    def forward(inputs):
        return load_balance_forward(inputs["logits"], chosen)

    def backward(dloss, aux_ctx):
        return {"logits": load_balance_backward(dloss, aux_ctx)}

    logits64 = router_logits(ctx)[None].astype(np.float64)             # (1, N, E)
    errors = gradcheck(forward, backward, {"logits": logits64}, dout=np.array(1.0))
    return errors["logits"]


def _backward_steps(dout, grads, ctx, static):
    _, aux_ctx, _ = _balance(ctx)
    daux = load_balance_backward(np.array(1.0, np.float32), aux_ctx)[0]   # (1, N, E) -> (N, E)
    drouter, dw_down = grads[PREFIX + "router"], grads[PREFIX + "experts.w_down"]
    error = aux_check(ctx)
    return [step(TEXT, "G", dout, shape_of(dout)),
            step(TEXT, "drouter", drouter, f"rows^T @ dlogits: {shape_of(drouter)}"),
            step(TEXT, "dw_down", dw_down, f"per expert: h^T @ (weight * G): "
                                           f"{shape_of(dw_down)}", show="line"),
            step(TEXT, "dx", grads["x"], f"experts' dx + router's dx: {shape_of(grads['x'])}"),
            step(TEXT, "daux_logits", daux, f"softmax_backward(E k load / N): {shape_of(daux)}"),
            step(TEXT, "aux_check", error, f"||analytic - numeric|| / (|a| + |n|) = {error:.1e}")]


MOE = Part(name="moe", defaults=dict(SIZES), make_inputs=_inputs, forward_steps=_forward_steps,
           backward_steps=_backward_steps, text=TEXT)
