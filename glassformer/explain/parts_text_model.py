"""Explanations for the block and model parts of `glassformer explain` (mha, block, gpt2), in
English and Chinese. The steps of one layer, shared by block and gpt2, are in parts_text."""
from __future__ import annotations

_PARAMS_EN = {
    "wq": "Query weights wq (C, H*D): all H heads' query projections side by side.",
    "bq": "Query bias bq (H*D,).",
    "wk": "Key weights wk (C, K*D): only K key heads, K <= H.",
    "bk": "Key bias bk (K*D,).",
    "wv": "Value weights wv (C, K*D): as many value heads as key heads.",
    "bv": "Value bias bv (K*D,).",
    "wo": "Output weights wo (H*D, C): mixes the heads' results back into width C.",
    "bo": "Output bias bo (C,).",
}

_PARAMS_ZH = {
    "wq": "查询权重 wq (C, H*D)：H 个头的查询投影并排放在一起。",
    "bq": "查询偏置 bq (H*D,)。",
    "wk": "键权重 wk (C, K*D)：只有 K 个键头，K <= H。",
    "bk": "键偏置 bk (K*D,)。",
    "wv": "值权重 wv (C, K*D)：值头的个数与键头相同。",
    "bv": "值偏置 bv (K*D,)。",
    "wo": "输出权重 wo (H*D, C)：把各个头的结果混合回宽度 C。",
    "bo": "输出偏置 bo (C,)。",
}

MODEL_EN = {
    "mha": {
        "title": "Multi-head attention block (blocks/attention.py)",
        "x": "Input x (B, T, C): one row per token.",
        **_PARAMS_EN,
        "q": "Queries for all heads at once, one matmul: x @ wq + bq.",
        "k": "Keys for the K key heads: x @ wk + bk.",
        "v": "Values for the K value heads: x @ wv + bv.",
        "q_heads": "Split into heads: the last axis H*D is cut into H pieces of D, and the head "
                   "axis moves in front of T, so each head is an independent (T, D) problem.",
        "k_heads": "Keys split the same way, into K heads.",
        "v_heads": "Values split into K heads.",
        "groups": "Grouped-query attention: the H query heads form K groups of G = {g}; every "
                  "query head of a group reads the same key/value head. Queries are viewed as "
                  "(B, K, G, T, D), keys as (B, K, 1, S, D), and NumPy broadcasts the shared head "
                  "with no copy. K = H is plain multi-head attention, K = 1 multi-query.",
        "scale": "Scale 1/sqrt(D), D = head width.",
        "scores": "Scores per head: q @ k^T * scale, (T, S) for each of the H heads.",
        "weights": "Weights per head: causal softmax of each row. Each head learns its own "
                   "pattern: the heatmaps (darker = more weight) usually differ.",
        "head_out": "Each head's output: its weights times its (shared) values, (T, D) per head.",
        "merged": "Merge: heads put side by side again, (B, H, T, D) -> (B, T, H*D).",
        "y": "Output y = merged @ wo + bo: width C again, ready for the residual add.",
        "dx": "dL/dx: x fed three projections (q, k, v), so three gradients add up.",
    },
    "block": {
        "title": "Pre-norm GPT-2 layer (blocks/residual.py)",
        "x": "Residual stream entering the layer (B, T, C).",
        "out": "block_forward's own output: equal to resid2 above.",
        "dx": "dL/dx: the skip paths carry G straight through; the paths through attention and "
              "the MLP add their share.",
    },
    "gpt2": {
        "title": "GPT-2 model (models/gpt2.py)",
        "ids": "The prompt as token ids (B=1, T).",
        "tokens": "The text each id stands for.",
        "tok": "Token embeddings: row ids[t] of tok_emb for each position.",
        "pos": "Position embeddings: row t of pos_emb for position t (learned, GPT-2 style).",
        "x0": "Residual stream at the start: token + position embedding.",
        "norm_f": "Final LayerNorm over the last layer's output.",
        "logits": "Logits (B, T, V): a score for every vocabulary entry at every position; "
                  "position t predicts token t + 1.",
        "next_probs": "Softmax of the last position's logits: the distribution of the next "
                      "token.",
        "top5_tiny": "The five most likely next tokens. This tiny model has random weights, so "
                     "its guesses carry no meaning; --ckpt DIR loads a trained one.",
        "top5_loaded": "The five most likely next tokens according to the loaded model.",
    },
}

MODEL_ZH = {
    "mha": {
        "title": "多头注意力模块（blocks/attention.py）",
        "x": "输入 x (B, T, C)：每个 token 一行。",
        **_PARAMS_ZH,
        "q": "一次矩阵乘法得到所有头的查询：x @ wq + bq。",
        "k": "K 个键头的键：x @ wk + bk。",
        "v": "K 个值头的值：x @ wv + bv。",
        "q_heads": "拆分成头：最后一维 H*D 切成 H 段，每段长 D，再把头这一维移到 T 前面，"
                   "于是每个头都是一个独立的 (T, D) 问题。",
        "k_heads": "键按同样方式拆成 K 个头。",
        "v_heads": "值拆成 K 个头。",
        "groups": "分组查询注意力（GQA）：H 个查询头分成 K 组，每组 G = {g} 个；同一组的查询头"
                  "读取同一个键/值头。查询被看成 (B, K, G, T, D)，键看成 (B, K, 1, S, D)，"
                  "NumPy 通过广播共享这个头，不做拷贝。K = H 就是普通多头注意力，K = 1 是多查询注意力。",
        "scale": "缩放因子 1/sqrt(D)，D 为每个头的宽度。",
        "scores": "每个头的分数：q @ k^T * scale，H 个头各得到一个 (T, S) 矩阵。",
        "weights": "每个头的权重：对每一行做因果 softmax。每个头学到自己的模式，"
                   "所以热力图（越深权重越大）通常各不相同。",
        "head_out": "每个头的输出：它的权重乘以它（共享）的值向量，每个头 (T, D)。",
        "merged": "合并：把各个头重新并排，(B, H, T, D) -> (B, T, H*D)。",
        "y": "输出 y = merged @ wo + bo：重新回到宽度 C，可以做残差相加了。",
        "dx": "dL/dx：x 进入了 q、k、v 三个投影，所以三条路径的梯度相加。",
    },
    "block": {
        "title": "前置归一化的 GPT-2 层（blocks/residual.py）",
        "x": "进入这一层的残差流 (B, T, C)。",
        "out": "block_forward 自己的输出：与上面的 resid2 相同。",
        "dx": "dL/dx：跳跃连接把 G 直接传过去；经过注意力和 MLP 的路径再各加上自己的一份。",
    },
    "gpt2": {
        "title": "GPT-2 模型（models/gpt2.py）",
        "ids": "提示词对应的 token id (B=1, T)。",
        "tokens": "每个 id 代表的文本。",
        "tok": "词嵌入：每个位置取 tok_emb 的第 ids[t] 行。",
        "pos": "位置嵌入：位置 t 取 pos_emb 的第 t 行（可学习，GPT-2 的做法）。",
        "x0": "最开始的残差流：词嵌入 + 位置嵌入。",
        "norm_f": "对最后一层输出做的最终 LayerNorm。",
        "logits": "logits (B, T, V)：每个位置对词表中每一项的打分；位置 t 预测第 t + 1 个 token。",
        "next_probs": "最后一个位置的 logits 做 softmax：下一个 token 的概率分布。",
        "top5_tiny": "最可能的五个下一个 token。这个小模型的权重是随机的，所以它的猜测没有意义；"
                     "用 --ckpt DIR 可以加载训练好的模型。",
        "top5_loaded": "按加载的模型，最可能的五个下一个 token。",
    },
}

MODEL_STEPS = {"en": MODEL_EN, "zh": MODEL_ZH}
