"""Titles and explanations for `glassformer explain PART`, in English and Chinese.

Explanations are grouped in sections: one per part (its "title" and its step keys), "common"
(the upstream gradient and parameter gradients) and "layer" (the steps of one Transformer layer,
shared by `block` and `gpt2`). A step names its text as "key" (in its part's section) or
"section:key". Texts may hold {placeholders} that the step fills in (a position, an id, a
parameter name). Every key exists in both languages with the same placeholders; a test checks it.
"""
from __future__ import annotations

import string

from glassformer.explain.parts_text_model import MODEL_STEPS
from glassformer.explain.parts_text_ops import OPS_STEPS

LANGS = ("en", "zh")

TITLES = {
    "en": {
        "forward": "forward pass",
        "backward": "backward pass for L = sum(out * G)",
        "batch": "batch",
        "head": "head",
        "check": "finite-difference check (float64): max rel. error",
        "check_ok": "OK",
        "check_bad": "MISMATCH",
        "check_skipped": "finite-difference check skipped: a loaded model has too many weights "
                         "to nudge one at a time (run without --ckpt for a checked tiny model).",
        "top_header": "rank     id  text            probability",
        "mean": "mean",
        "std": "std",
    },
    "zh": {
        "forward": "前向传播",
        "backward": "反向传播：损失 L = sum(out * G)",
        "batch": "批次",
        "head": "头",
        "check": "有限差分校验（float64）：最大相对误差",
        "check_ok": "通过",
        "check_bad": "不一致",
        "check_skipped": "跳过有限差分校验：加载的模型权重太多，无法逐个扰动"
                         "（去掉 --ckpt，可在经过校验的小模型上运行）。",
        "top_header": "名次     id  文本            概率",
        "mean": "均值",
        "std": "标准差",
    },
}

COMMON_STEPS = {
    "en": {
        "G": "Upstream gradient G = dL/d(out). We pick L = sum(out * G), so dL/d(out) is G "
             "itself: all ones, or random with --grad random.",
        "dparam": "dL/d{param}: same shape as the parameter; an optimizer step moves {param} "
                  "against it.",
        "dbk": "dL/d{param} is exactly 0. The key bias adds one fixed vector to every key, which "
               "adds the same number to a whole row of scores, and softmax ignores a constant "
               "added to a row.",
    },
    "zh": {
        "G": "上游梯度 G = dL/d(out)。取 L = sum(out * G)，于是 dL/d(out) 就是 G 本身："
             "全为 1，或用 --grad random 取随机值。",
        "dparam": "dL/d{param}：形状与该参数相同；优化器沿它的反方向更新 {param}。",
        "dbk": "dL/d{param} 恰好为 0。键偏置给每个键加上同一个向量，相当于给一整行分数加上"
               "同一个数，而 softmax 对整行加常数不敏感。",
    },
}

LAYER_STEPS = {
    "en": {
        "norm1": "norm1: LayerNorm before attention (pre-norm): each token's row rescaled to "
                 "mean 0, std 1, then w and b applied. The residual stream itself is untouched.",
        "weights": "Attention weights per head: row t is how token t spreads its attention over "
                   "tokens 0..t (causal, so the upper triangle is 0).",
        "merged": "Each head's weighted sum of values, heads placed side by side again.",
        "attn_out": "Attention output: the merged heads projected back to width C, ready to be "
                    "added to the residual stream.",
        "resid1": "First residual add: x + attn_out. The layer adds to the stream instead of "
                  "replacing it, so gradients also flow straight through.",
        "norm2": "norm2: LayerNorm before the MLP, on the stream after attention.",
        "mlp_up": "MLP up-projection: width C -> F = 4C, one hidden vector per token.",
        "mlp_act": "GELU (tanh form, as GPT-2) on every hidden unit: negatives are squashed "
                   "towards 0, positives pass almost unchanged.",
        "mlp_out": "MLP down-projection: width F -> C, what the MLP adds to the stream.",
        "resid2": "Second residual add: resid1 + mlp_out, the layer's output (the next "
                  "layer's input).",
    },
    "zh": {
        "norm1": "norm1：注意力之前的 LayerNorm（前置归一化）：把每个 token 的一行缩放成均值 0、"
                 "标准差 1，再乘 w 加 b。残差流本身不被改动。",
        "weights": "每个头的注意力权重：第 t 行表示 token t 如何把注意力分配给 token 0..t"
                   "（因果掩码，所以上三角为 0）。",
        "merged": "每个头对值向量的加权和，再把各个头并排拼回去。",
        "attn_out": "注意力输出：把拼好的各头投影回宽度 C，准备加回残差流。",
        "resid1": "第一次残差相加：x + attn_out。这一层是往残差流里“加”东西而不是替换，"
                  "所以梯度也能直接穿过去。",
        "norm2": "norm2：MLP 之前的 LayerNorm，作用在经过注意力之后的残差流上。",
        "mlp_up": "MLP 升维投影：宽度 C -> F = 4C，每个 token 得到一个隐藏向量。",
        "mlp_act": "对每个隐藏单元做 GELU（tanh 近似，与 GPT-2 相同）：负数被压向 0，"
                   "正数几乎原样通过。",
        "mlp_out": "MLP 降维投影：宽度 F -> C，也就是 MLP 加进残差流的内容。",
        "resid2": "第二次残差相加：resid1 + mlp_out，即这一层的输出（下一层的输入）。",
    },
}

STEPS = {lang: {"common": COMMON_STEPS[lang], "layer": LAYER_STEPS[lang], **OPS_STEPS[lang],
                **MODEL_STEPS[lang]}
         for lang in LANGS}


def placeholders(text: str) -> set[str]:
    """The {names} a text expects."""
    return {name for _, name, _, _ in string.Formatter().parse(text) if name}


def step_text(part: str, key: str, lang: str, fmt: dict | None) -> str:
    """The explanation of `key` ("key" in `part`'s section, or "section:key"), filled in."""
    section, _, name = key.rpartition(":")
    text = STEPS[lang][section or part][name]
    return text.format(**(fmt or {}))
