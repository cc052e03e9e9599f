"""`explain dpo`: the DPO loss (ops/dpo_loss.py) on a tiny model, from its logits to dL/dlogits.

A tiny random LLaMA (vocab 12, C=8) reads two preference pairs, chosen rows first; the policy is
the model with a LoRA adapter on wq, the reference the same model with the adapter switched off
(finetune's default). The checked pair starts at the policy's logits: token log-probs of the
completion, their sums, the log-ratios against the reference, the sigmoid loss. With the adapter
still fresh (B = 0) the policy IS the reference and the loss is ln 2: the step shows it.
"""
from __future__ import annotations

import math

import numpy as np

from glassformer.explain.core import Pair, Part, Setup, normal, shape_of, step, with_common
from glassformer.models import llama
from glassformer.ops.dpo_loss import dpo_loss_backward, dpo_loss_forward
from glassformer.ops.token_logps import token_logps_backward, token_logps_forward

BETA = 0.1
V, T = 12, 5
PROMPT = 2   # the first PROMPT targets of each row are the prompt's: IGNORE_INDEX

TEXT = with_common({
    "en": {
        "title": "DPO: preference pairs, log-ratios against a reference, a sigmoid loss",
        "targets": "Targets y (2B, T): chosen rows first, then rejected; -100 on the prompt, so "
                   "only the completion's tokens count (the chat template's reply and "
                   "end-of-turn).",
        "logits": "Policy logits (2B, T, V): the tiny model with its LoRA adapter, one batched "
                  "forward for chosen and rejected.",
        "logp": "log pi(y_t): log-softmax picked at each target, 0 on the prompt.",
        "seq": "Sequence log-probs: the sum over the completion, one per row (2B,).",
        "ref": "Reference sequence log-probs (the adapter switched off): constants, no gradient.",
        "ratios": "Log-ratios (pi - ref) for chosen (first B) and rejected (last B). beta times "
                  "them are TRL's rewards/chosen and rewards/rejected.",
        "delta": "delta = chosen log-ratio - rejected log-ratio: how much more the policy moved "
                 "toward the chosen reply than toward the rejected one.",
        "out": "loss = mean -log sigmoid(beta * delta), beta = {beta}.",
        "ln2": "Step 1 of a run: a fresh adapter has B = 0, the policy equals the reference, "
               "delta = 0 and the loss is -log sigmoid(0) = ln 2 = 0.693147.",
        "dseq": "dL/d(sequence log-prob): -beta sigmoid(-beta delta) / N for chosen, the "
                "opposite for rejected: push chosen up, rejected down, harder where the pair is "
                "still ranked wrong.",
        "dlogits": "dL/dlogits = w * (onehot(y) - softmax): each row's weight w on its "
                   "completion tokens, 0 on the prompt. This flows into the model's backward.",
    },
    "zh": {
        "title": "DPO：偏好对、相对参考模型的对数比、sigmoid 损失",
        "targets": "目标 y (2B, T)：先是被选回答（chosen）的各行，再是被拒回答（rejected）；提示部分"
                   "为 -100，只有回答的 token 计入（聊天模板写出的回复和轮次结束符）。",
        "logits": "策略模型的 logits (2B, T, V)：带 LoRA 适配器的小模型，chosen 和 rejected 在"
                  "同一次批量前向中计算。",
        "logp": "log pi(y_t)：在每个目标处取 log-softmax 的值，提示部分为 0。",
        "seq": "序列对数概率：在回答上求和，每行一个 (2B,)。",
        "ref": "参考模型的序列对数概率（关掉适配器）：常数，不求梯度。",
        "ratios": "对数比 (pi - ref)：前 B 个是 chosen，后 B 个是 rejected。乘以 beta 就是 TRL "
                  "的 rewards/chosen 与 rewards/rejected。",
        "delta": "delta = chosen 的对数比 - rejected 的对数比：策略向 chosen 比向 rejected 多"
                 "靠近了多少。",
        "out": "损失 = mean -log sigmoid(beta * delta)，beta = {beta}。",
        "ln2": "训练第 1 步：新适配器的 B = 0，策略模型等于参考模型，delta = 0，损失为 "
               "-log sigmoid(0) = ln 2 = 0.693147。",
        "dseq": "dL/d(序列对数概率)：chosen 为 -beta sigmoid(-beta delta) / N，rejected 取相反数："
                "抬高 chosen、压低 rejected，排序仍然错的对推得更用力。",
        "dlogits": "dL/dlogits = w * (onehot(y) - softmax)：每行的权重 w 作用在它的回答 token 上，"
                   "提示部分为 0。它再流入模型的反向传播。",
    },
})


def tiny_logits(rng, ids) -> tuple[np.ndarray, np.ndarray]:
    """(policy logits, reference logits) of a tiny random LLaMA with and without a LoRA on wq."""
    cfg = llama.LlamaConfig(vocab_size=V, max_seq_len=16, n_layer=1, n_head=2, n_kv_head=1,
                            d_model=8)
    params = llama.init_params(cfg, rng)
    params = {k: normal(rng, v.shape, 0.5, 1.0 if "norm" in k else 0.0) for k, v in params.items()}
    adapter = {"blocks.0.attn.wq.lora_A": normal(rng, (8, 2), 0.5),
               "blocks.0.attn.wq.lora_B": normal(rng, (2, 8), 0.5),
               "blocks.0.attn.wq.lora_scale": np.array(2.0), "blocks.0.attn.wq.lora_dropout":
               np.array(0.0)}
    policy = llama.forward({**params, **adapter}, ids, cfg)[0]
    return policy, llama.forward(params, ids, cfg)[0]


def _inputs(options: dict, rng) -> Setup:
    ids = rng.integers(0, V, (4, T + 1))
    ids[2:, :PROMPT + 1] = ids[:2, :PROMPT + 1]            # a pair shares its prompt
    targets = ids[:, 1:].copy()
    targets[:, :PROMPT] = -100                              # (2B, T)
    logits, ref_logits = tiny_logits(rng, ids[:, :-1])
    ref = token_logps_forward(ref_logits, targets)[0].sum(axis=1)    # (2B,)

    def forward(inputs):
        logp, logp_ctx = token_logps_forward(inputs["logits"], targets)
        seq = logp.sum(axis=1)
        loss, ctx = dpo_loss_forward(seq[:2], seq[2:], ref[:2], ref[2:], beta=BETA)
        return np.array(loss), (logp, seq, logp_ctx, ctx)

    def backward(dout, ctx):
        _, _, logp_ctx, loss_ctx = ctx
        dchosen, drejected = dpo_loss_backward(float(dout), loss_ctx)
        dseq = np.concatenate([dchosen, drejected])
        dtoken = np.broadcast_to(dseq[:, None], targets.shape)
        return {"logits": token_logps_backward(dtoken, logp_ctx), "dseq": dseq}

    return Setup({"logits": logits}, Pair(forward, backward),
                 {"targets": targets, "ref": ref}, checked=("logits",))


def _steps(inputs, out, ctx, static):
    logp, seq, _, _ = ctx
    ratios = seq - static["ref"]                                            # (2B,)
    delta = ratios[:2] - ratios[2:]                                         # (B,)
    same = dpo_loss_forward(static["ref"][:2], static["ref"][2:], static["ref"][:2],
                            static["ref"][2:], beta=BETA)[0]
    return [step(TEXT, "targets", static["targets"].astype(np.float32), shape_of(logp)),
            step(TEXT, "logits", inputs["logits"], shape_of(inputs["logits"]), show="line"),
            step(TEXT, "logp", logp, f"log_softmax(logits)[y] -> {shape_of(logp)}"),
            step(TEXT, "seq", seq, f"sum_t -> {shape_of(seq)}"),
            step(TEXT, "ref", static["ref"], shape_of(static["ref"])),
            step(TEXT, "ratios", ratios, "pi - ref"),
            step(TEXT, "delta", delta, "chosen - rejected"),
            step(TEXT, "out", out, "mean -log sigmoid(beta delta)", beta=BETA),
            step(TEXT, "ln2", np.array([same, math.log(2.0)]), "policy = reference")]


def logits_backward_steps(text: dict, loss_input: str):
    """The backward steps of a loss on tiny_logits' policy (dpo, grpo): G, the gradient at the
    loss's own input (`loss_input`: "dseq", "dlogp"), then dL/dlogits, the line that flows into
    the model's backward; `text` is the part's."""
    def backward_steps(dout, grads, ctx, static):
        return [step(text, "G", dout, shape_of(dout)),
                step(text, loss_input, grads[loss_input], shape_of(grads[loss_input])),
                step(text, "dlogits", grads["logits"], shape_of(grads["logits"]), show="line")]
    return backward_steps


DPO = Part(name="dpo", defaults={}, make_inputs=_inputs, forward_steps=_steps,
           backward_steps=logits_backward_steps(TEXT, "dseq"), text=TEXT)
