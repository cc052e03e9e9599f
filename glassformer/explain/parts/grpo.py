"""`explain grpo`: GRPO's group advantages and clipped surrogate (ops/grpo_loss.py) on a tiny
model, from its logits to dL/dlogits.

One prompt, a group of G = 4 sampled completions with fixed rewards (two tied). The old policy
is the tiny LLaMA without its LoRA adapter and the current one has it, as on the second update
of one generation, so ratios leave 1 and some tokens are clipped (in a glassformer run, one
update per generation, the ratio is exactly 1). Loss type dapo: a mean over every completion
token. The checked pair starts at the current policy's logits.
"""
from __future__ import annotations

import numpy as np

from glassformer.explain.core import Pair, Part, Setup, shape_of, step, with_common
from glassformer.explain.parts.dpo import V, logits_backward_steps, tiny_logits
from glassformer.ops.grpo_loss import group_advantages, grpo_loss_backward, grpo_loss_forward
from glassformer.ops.token_logps import token_logps_backward, token_logps_forward

G, T, PROMPT = 4, 5, 2
REWARDS = np.array([[2.5], [1.0], [1.0], [0.2]])    # (G, 1): one reward function, two tied
EPSILON = 0.2

TEXT = with_common({
    "en": {
        "title": "GRPO: group advantages and the clipped ratio",
        "rewards": "Rewards of the G = 4 completions of one prompt (two tied).",
        "adv": "Advantages (r - mean) / (std + 1e-4), std with Bessel's n - 1 over the group: "
               "better than the group is positive. A group whose rewards are all equal gets 0 "
               "(no signal, counted in frac_reward_zero_std).",
        "logits": "Current policy logits (G, T, V): the tiny model with its adapter.",
        "logp": "log pi(y_t) of each completion token (0 on the prompt).",
        "old": "Old policy log-probs (the model without the adapter here): constants.",
        "ratio": "ratio = exp(logp - old_logp) per token.",
        "clipped": "clip(ratio, 1 - eps, 1 + eps), eps = {eps}.",
        "out": "loss = sum over tokens of -min(ratio A, clip(ratio) A), divided by the number of "
               "completion tokens (dapo).",
        "dlogp": "dL/dlogp = -A ratio / n_tokens where the unclipped term is the min, 0 where "
                 "the clip holds: a token already pushed far enough gets no more push.",
        "dlogits": "dL/dlogits = dlogp * (onehot(y) - softmax), into the model's backward.",
    },
    "zh": {
        "title": "GRPO：组内优势与截断的概率比",
        "rewards": "同一提示的 G = 4 个回答的奖励（其中两个相同）。",
        "adv": "优势 (r - 均值) / (标准差 + 1e-4)，标准差在组内用贝塞尔校正 n - 1：比组内平均好的为正。"
               "奖励全相同的组优势为 0（没有信号，计入 frac_reward_zero_std）。",
        "logits": "当前策略的 logits (G, T, V)：带适配器的小模型。",
        "logp": "每个回答 token 的 log pi(y_t)（提示部分为 0）。",
        "old": "旧策略的对数概率（这里是不带适配器的模型）：常数。",
        "ratio": "概率比 ratio = exp(logp - old_logp)，逐 token。",
        "clipped": "clip(ratio, 1 - eps, 1 + eps)，eps = {eps}。",
        "out": "损失 = 对所有 token 求和 -min(ratio A, clip(ratio) A)，再除以回答 token 总数（dapo）。",
        "dlogp": "dL/dlogp = -A ratio / token 数（未截断的项取到最小值时），截断生效处为 0："
                 "已经推得够远的 token 不再继续推。",
        "dlogits": "dL/dlogits = dlogp * (onehot(y) - softmax)，再流入模型的反向传播。",
    },
})


def _inputs(options: dict, rng) -> Setup:
    ids = rng.integers(0, V, (G, T + 1))
    ids[:, :PROMPT + 1] = ids[0, :PROMPT + 1]             # one prompt, G completions
    targets = ids[:, 1:].copy()
    targets[:, :PROMPT] = -100                            # (G, T)
    mask = targets != -100
    logits, old_logits = tiny_logits(rng, ids[:, :-1])
    old = token_logps_forward(old_logits, targets)[0].astype(np.float64)   # (G, T)
    adv, _, _ = group_advantages(REWARDS, np.ones(1), G)                    # (G,)

    def forward(inputs):
        logp, logp_ctx = token_logps_forward(inputs["logits"], targets)
        loss, ctx, _ = grpo_loss_forward(logp, old, adv, mask, epsilon=EPSILON,
                                         loss_type="dapo")
        return np.array(loss), (logp, logp_ctx, ctx)

    def backward(dout, ctx):
        _, logp_ctx, loss_ctx = ctx
        dlogp = grpo_loss_backward(float(dout), loss_ctx)
        return {"logits": token_logps_backward(dlogp, logp_ctx), "dlogp": dlogp}

    return Setup({"logits": logits}, Pair(forward, backward),
                 {"old": old, "adv": adv, "mask": mask}, checked=("logits",))


def _steps(inputs, out, ctx, static):
    logp = ctx[0]
    ratio = np.where(static["mask"], np.exp(logp - static["old"]), 0.0)
    clipped = np.where(static["mask"], np.clip(ratio, 1.0 - EPSILON, 1.0 + EPSILON), 0.0)
    return [step(TEXT, "rewards", REWARDS[:, 0], shape_of(REWARDS[:, 0])),
            step(TEXT, "adv", static["adv"], "(r - mean) / (std + 1e-4)"),
            step(TEXT, "logits", inputs["logits"], shape_of(inputs["logits"]), show="line"),
            step(TEXT, "logp", logp, shape_of(logp)),
            step(TEXT, "old", static["old"], shape_of(static["old"])),
            step(TEXT, "ratio", ratio, "exp(logp - old)"),
            step(TEXT, "clipped", clipped, "clip", eps=EPSILON),
            step(TEXT, "out", out, "dapo")]


GRPO = Part(name="grpo", defaults={}, make_inputs=_inputs, forward_steps=_steps,
            backward_steps=logits_backward_steps(TEXT, "dlogp"), text=TEXT)
