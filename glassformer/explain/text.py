"""Labels and one-line explanations for the attention walkthrough, in English and Chinese.

Every key used by the trace has an entry in both languages; a test checks this.
"""
from __future__ import annotations

LANGS = ("en", "zh")

TITLES = {
    "en": {
        "forward": "Self-attention by hand, forward pass",
        "backward": "Backward pass for L = sum(output * G)",
        "causal": "causal (decoder, GPT-style)",
        "bidirectional": "bidirectional (encoder, BERT-style)",
        "compare": "Causal vs bidirectional attention weights",
        "shape": "shape",
        "check": "finite-difference check (float64): max rel. error",
        "batch": "batch",
    },
    "zh": {
        "forward": "手算自注意力：前向传播",
        "backward": "反向传播：损失 L = sum(output * G)",
        "causal": "因果（解码器，GPT 风格）",
        "bidirectional": "双向（编码器，BERT 风格）",
        "compare": "因果注意力与双向注意力的权重对比",
        "shape": "形状",
        "check": "有限差分校验（float64）：最大相对误差",
        "batch": "批次",
    },
}

STEPS = {
    "en": {
        "X": "Input X: one row per token, C=d_model numbers each, shape (B, T, C).",
        "Wq": "Query projection Wq (C, D): learned; maps a token to what it is looking for.",
        "Wk": "Key projection Wk (C, D): learned; maps a token to what it can be matched on.",
        "Wv": "Value projection Wv (C, D): learned; maps a token to what it passes on.",
        "Q": "Queries Q = X @ Wq: each token's question. Only the last axis changes, C -> D.",
        "K": "Keys K = X @ Wk: each token's label that queries are compared with.",
        "V": "Values V = X @ Wv: the content a token hands over when attended to.",
        "scale": "Scale 1/sqrt(D): dot products of D-dim vectors grow like sqrt(D); scaling keeps "
                 "softmax out of its flat, saturated region.",
        "scores": "Scores Q @ K^T * scale: row i = query token i, column j = key token j; "
                  "bigger means a better match.",
        "mask_causal": "Causal mask (True = may attend): token i sees tokens j <= i only, "
                       "so a decoder never peeks at the future. (The seed prints the opposite "
                       "convention, True = hidden.)",
        "mask_bidirectional": "No causal mask: every entry True. An encoder such as BERT lets "
                              "each token read the whole sentence, left and right.",
        "masked_scores": "Masked scores: forbidden entries become -inf, so softmax gives them "
                         "weight exactly 0. (The seed uses -1e9; the weights are the same.)",
        "weights": "Weights = softmax of each row: subtract the row max (stability), exponentiate, "
                   "divide by the row sum. Each row is a distribution over visible keys.",
        "output": "Output = weights @ V: each token gets the weighted average of the values it "
                  "can see.",
        "G": "Upstream gradient G = dL/d(output). With L = sum(output * G), that is G itself.",
        "dweights": "dL/dweights = G @ V^T: how the loss changes if a weight moves.",
        "dV": "dL/dV = weights^T @ G: each value collects the gradient of every query that "
              "read it, in proportion to its weight.",
        "dscores": "dL/dscores through softmax, without building its Jacobian: "
                   "w * (dw - sum_j dw_j w_j) per row. Masked entries get exactly 0.",
        "dQ": "dL/dQ = dscores @ K * scale (the score was Q K^T * scale).",
        "dK": "dL/dK = dscores^T @ Q * scale.",
        "dWq": "dL/dWq = X^T @ dQ, summed over batch and tokens: (C, T) @ (T, D) -> (C, D).",
        "dWk": "dL/dWk = X^T @ dK.",
        "dWv": "dL/dWv = X^T @ dV.",
        "dX": "dL/dX = dQ Wq^T + dK Wk^T + dV Wv^T: X fed three projections, so three "
              "gradients add up.",
        "compare_rows": "Rows that changed (query tokens whose view got wider)",
        "compare_last": "The last token already saw every token, so its row is the same.",
        "compare_upper": "Above the diagonal, causal weights are exactly 0; bidirectional ones "
                         "are not.",
    },
    "zh": {
        "X": "输入 X：每个 token 占一行，每行 C=d_model 个数，形状 (B, T, C)。",
        "Wq": "查询投影 Wq (C, D)：可学习参数，把 token 映射成“我想找什么”。",
        "Wk": "键投影 Wk (C, D)：可学习参数，把 token 映射成“我能被怎样匹配”。",
        "Wv": "值投影 Wv (C, D)：可学习参数，把 token 映射成“被关注时我交出的内容”。",
        "Q": "查询 Q = X @ Wq：每个 token 提出的问题。只有最后一维变化，C -> D。",
        "K": "键 K = X @ Wk：每个 token 的“标签”，查询拿它来比对。",
        "V": "值 V = X @ Wv：token 被关注时传递出去的内容。",
        "scale": "缩放因子 1/sqrt(D)：D 维向量的点积大约随 sqrt(D) 增长；缩放后 softmax "
                 "不会落进梯度很小的饱和区。",
        "scores": "分数 Q @ K^T * scale：第 i 行是查询 token i，第 j 列是键 token j，"
                  "数值越大越匹配。",
        "mask_causal": "因果掩码（True 表示可以关注）：token i 只能看 j <= i 的 token，"
                       "解码器因此看不到未来。（种子教程用的是相反约定：True 表示遮住。）",
        "mask_bidirectional": "没有因果掩码：全部为 True。BERT 这样的编码器让每个 token "
                              "同时读到左右两边。",
        "masked_scores": "掩码后的分数：被禁止的位置变成 -inf，softmax 后权重恰好为 0。"
                         "（种子教程用 -1e9，得到的权重相同。）",
        "weights": "权重 = 每一行做 softmax：先减去行最大值（数值稳定），取指数，再除以行和。"
                   "每一行都是对可见键的概率分布。",
        "output": "输出 = weights @ V：每个 token 得到它可见的值向量的加权平均。",
        "G": "上游梯度 G = dL/d(output)。取 L = sum(output * G)，它就是 G 本身。",
        "dweights": "dL/dweights = G @ V^T：某个权重变动时损失如何变化。",
        "dV": "dL/dV = weights^T @ G：每个值向量按权重收集所有读过它的查询的梯度。",
        "dscores": "经过 softmax 得到 dL/dscores，不必构造雅可比矩阵："
                   "每行 w * (dw - sum_j dw_j w_j)。被掩码的位置梯度恰好为 0。",
        "dQ": "dL/dQ = dscores @ K * scale（因为分数是 Q K^T * scale）。",
        "dK": "dL/dK = dscores^T @ Q * scale。",
        "dWq": "dL/dWq = X^T @ dQ，对批次和 token 求和：(C, T) @ (T, D) -> (C, D)。",
        "dWk": "dL/dWk = X^T @ dK。",
        "dWv": "dL/dWv = X^T @ dV。",
        "dX": "dL/dX = dQ Wq^T + dK Wk^T + dV Wv^T：X 进入了三个投影，三条路径的梯度相加。",
        "compare_rows": "发生变化的行（视野变宽的查询 token）",
        "compare_last": "最后一个 token 本来就能看到所有 token，所以它这一行不变。",
        "compare_upper": "对角线以上，因果权重恰好为 0，双向权重则不是。",
    },
}


def step_text(key: str, lang: str, *, causal: bool = True) -> str:
    """The explanation for a trace step; the mask's depends on the mode."""
    if key == "mask":
        key = "mask_causal" if causal else "mask_bidirectional"
    return STEPS[lang][key]
