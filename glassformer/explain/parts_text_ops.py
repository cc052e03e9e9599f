"""Explanations for the op parts of `glassformer explain` (norms, activations, softmax and loss,
embedding, RoPE), in English and Chinese. One section per part; see parts_text for the layout."""
from __future__ import annotations

OPS_EN = {
    "layer_norm": {
        "title": "LayerNorm (ops/layer_norm.py)",
        "x": "Input x: B*T rows (one per token) of C numbers. LayerNorm works on each row alone.",
        "w": "Scale w (gamma), learned, one per channel: after normalizing, the model may stretch "
             "each channel again.",
        "b": "Shift b (beta), learned, one per channel.",
        "mean": "Mean of each row. The op does not keep it (its backward only needs xhat and "
                "rstd), so it is read back as x - xhat / rstd.",
        "centered": "Centered rows x - mean: every row now averages 0.",
        "var": "Variance of each row, biased: divided by C, not C - 1 (as torch and GPT-2 do). "
               "Read back from rstd.",
        "rstd": "rstd = 1 / sqrt(var + eps), saved in ctx. eps sits inside the square root, so a "
                "constant row gives a large but finite factor, never a division by zero.",
        "xhat": "xhat = centered * rstd, saved in ctx: each row has mean 0 and variance ~1.",
        "y": "Output y = xhat * w + b, shape unchanged (B, T, C).",
        "dx": "dL/dx: G reaches xhat as g = G * w; then the row's mean of g and its projection "
              "on xhat are taken away, because moving one input also moves the row's mean and "
              "spread. Each row of dx sums to 0.",
        "dw": "dL/dw: G * xhat, summed over every token.",
        "db": "dL/db: G summed over every token.",
    },
    "rms_norm": {
        "title": "RMSNorm (ops/rms_norm.py)",
        "x": "Input x: B*T rows of C numbers, each normalized on its own.",
        "w": "Scale w, learned, one per channel. RMSNorm has no shift.",
        "mean_square": "Mean of x^2 over each row: no mean is subtracted first, which is the "
                       "whole difference from LayerNorm. Read back from rstd.",
        "rstd": "rstd = 1 / sqrt(mean_square + eps), saved in ctx (eps inside the root).",
        "xhat": "xhat = x * rstd, saved in ctx: each row now has root-mean-square ~1.",
        "y": "Output y = xhat * w, shape (B, T, C).",
        "dx": "dL/dx: like LayerNorm's, minus the mean(g) term, since no mean was subtracted "
              "in the forward.",
        "dw": "dL/dw: G * xhat, summed over every token.",
    },
    "gelu": {
        "title": "GELU (ops/activation.py)",
        "x": "Input x, any shape; GELU acts on each number separately.",
        "slope_none": "Local slope d out / d x = Phi(x) + x phi(x), where Phi(x) is the probability "
                      "that a standard normal variable is below x and phi its density. Computed "
                      "in the forward and saved in ctx, so backward is one product.",
        "slope_tanh": "Local slope of GPT-2's tanh form, g (1 + x (1 - g) 2 du/dx) with the gate "
                      "g = sigmoid(2u), a close fit to Phi(x) that avoids erf. Computed in the "
                      "forward and saved in ctx, so backward is one product.",
        "out_none": "out = x * Phi(x): a smooth ReLU that dips slightly below 0 around x = -0.75.",
        "out_tanh": "out = x * gate (tanh form): within about 1e-3 of exact GELU.",
        "dx": "dL/dx = G * slope, the slope the forward saved: 0.5 at x = 0, a little above 1 "
              "near x = 1.5, fading to 0 for very negative x.",
    },
    "silu": {
        "title": "SiLU / swish (ops/activation.py)",
        "x": "Input x, any shape; SiLU acts on each number separately.",
        "sigmoid": "sigmoid(x) = 1 / (1 + exp(-x)), kept in ctx so backward needs no second exp.",
        "out": "out = x * sigmoid(x): close to 0 for very negative x, close to x for large x.",
        "dx": "dL/dx = G * s * (1 + x * (1 - s)) with s = sigmoid(x).",
    },
    "swiglu": {
        "title": "SwiGLU (ops/swiglu.py)",
        "gate": "gate branch (B, T, F): in LLaMA's MLP this is x @ w_gate.",
        "up": "up branch (B, T, F): x @ w_up, a second, purely linear view of the token.",
        "sigmoid": "sigmoid(gate), from SiLU's ctx.",
        "activated": "silu(gate) = gate * sigmoid(gate), kept in ctx: decides how much of each "
                     "up unit passes.",
        "out": "out = silu(gate) * up, elementwise; the MLP then projects it back with w_down.",
        "dup": "dL/dup = G * silu(gate): the gate acts as a fixed multiplier for the up branch.",
        "dgate": "dL/dgate: G * up sent back through SiLU's slope.",
    },
    "softmax": {
        "title": "Softmax (ops/softmax.py)",
        "x": "Scores x: softmax runs along the last axis, one distribution per row.",
        "probs": "probs: subtract each row's max, exponentiate, divide by the row's sum. All "
                 "entries positive, each row sums to 1. Kept in ctx, all the backward needs.",
        "x_shifted": "The same scores plus 1000. exp(1000) is inf even in float64.",
        "probs_shifted": "Softmax of the shifted scores: identical probabilities and no overflow, "
                         "because the row max is subtracted before exp.",
        "dx": "dL/dx = p * (G - sum(G * p)) per row, no Jacobian built. With G all ones it is "
              "exactly 0: the probabilities always sum to 1, so their sum cannot change.",
    },
    "cross_entropy": {
        "title": "Cross-entropy loss (ops/cross_entropy.py)",
        "logits": "Logits (B, T, V): one unnormalized score per class at each position.",
        "targets": "Targets (B, T): the correct class at each position.",
        "log_probs": "log_softmax(logits), via log-sum-exp so nothing overflows. The loss's "
                     "ctx keeps probabilities, not these, so they come from log_softmax_forward.",
        "picked": "The log-probability of each position's target, read off log_probs.",
        "n_valid": "How many positions count in the mean (targets equal to ignore_index would "
                   "not). From ctx.",
        "loss": "loss = -mean(picked): a single number; log(V) would be a uniform guess.",
        "probs": "softmax(logits), kept in ctx for the backward.",
        "onehot": "The targets written as one-hot rows, to compare with dlogits.",
        "G_loss": "Upstream gradient dL/dloss: the loss is one number, so G is one number too.",
        "dlogits": "dL/dlogits = (probs - onehot) * G / n_valid: softmax and log cancel into "
                   "\"predicted minus wanted\". Each row sums to 0.",
    },
    "embedding": {
        "title": "Embedding lookup (ops/embedding.py)",
        "table": "Table (V, C): one learned row of C numbers for each of V ids.",
        "ids": "Ids (B, T): integers in [0, V). One id below is forced to appear twice.",
        "out": "out = table[ids]: each id copies its row. Same as one-hot(ids) @ table, without "
               "building the one-hot matrix.",
        "dtable": "dL/dtable: each row of G is added into the table row its id picked, with "
                  "np.add.at, which adds repeated ids up (a plain `dtable[ids] += G` would keep "
                  "only one of them).",
        "repeated_id": "Id {id} is looked up more than once.",
        "repeated_at": "Where id {id} occurs, as (batch, position) pairs.",
        "repeated_G": "The rows of G at those positions: both flow into table row {id}.",
        "repeated_dtable": "dtable[{id}]: the sum of the rows above.",
        "unused_ids": "Ids nobody looked up: their dtable rows are exactly 0.",
    },
    "rope": {
        "title": "Rotary position embedding, RoPE (ops/rope.py)",
        "positions": "Positions 0 .. T-1, one per token.",
        "cos": "cos table (T, D): channel pair i (i and i + D/2) turns by angle "
               "pos * theta^(-2i/D); early pairs turn fast, late pairs slowly. From ctx.",
        "sin": "sin table of the same angles. From ctx.",
        "q": "Queries q (B, H, T, D) before rotation.",
        "q_rot": "q after RoPE: each channel pair of token t turned by its angle at position t. "
                 "Lengths are unchanged; only directions move.",
        "q_fixed": "To test the key property, one query vector placed at every position.",
        "k_fixed": "And one key vector placed at every position.",
        "scores_fixed": "Scores of the turned copies against each other: every diagonal holds "
                        "one value, so a score depends only on how far apart the tokens are.",
        "score": "q at position {m} . k at position {n} (offset {offset}).",
        "dq": "dL/dq: G turned back by the same angles (rotation by -angle), since a rotation's "
              "transpose is its inverse.",
    },
}

OPS_ZH = {
    "layer_norm": {
        "title": "层归一化 LayerNorm（ops/layer_norm.py）",
        "x": "输入 x：共 B*T 行（每个 token 一行），每行 C 个数。LayerNorm 对每一行单独处理。",
        "w": "缩放 w（gamma）：可学习参数，每个通道一个；归一化之后，模型还可以把各通道重新拉伸。",
        "b": "平移 b（beta）：可学习参数，每个通道一个。",
        "mean": "每一行的均值。算子没有保存它（反向只需要 xhat 和 rstd），这里由 "
                "x - xhat / rstd 反推得到。",
        "centered": "中心化后的行 x - mean：现在每一行的平均值都是 0。",
        "var": "每一行的方差，有偏估计：除以 C 而不是 C - 1（与 torch、GPT-2 一致）。由 rstd 反推。",
        "rstd": "rstd = 1 / sqrt(var + eps)，保存在 ctx 中。eps 放在根号里面，所以即使一行全是"
                "常数，也只会得到一个很大但有限的系数，不会除以零。",
        "xhat": "xhat = centered * rstd，保存在 ctx 中：每一行均值为 0、方差约为 1。",
        "y": "输出 y = xhat * w + b，形状不变 (B, T, C)。",
        "dx": "dL/dx：G 先变成到达 xhat 的 g = G * w；再减去该行 g 的均值以及 g 在 xhat 上的"
              "投影，因为改动一个输入也会改变整行的均值和离散程度。dx 的每一行之和为 0。",
        "dw": "dL/dw：G * xhat，对所有 token 求和。",
        "db": "dL/db：G 对所有 token 求和。",
    },
    "rms_norm": {
        "title": "均方根归一化 RMSNorm（ops/rms_norm.py）",
        "x": "输入 x：B*T 行，每行 C 个数，各行单独归一化。",
        "w": "缩放 w：可学习参数，每个通道一个。RMSNorm 没有平移项。",
        "mean_square": "每一行 x^2 的均值：事先不减均值，这正是它与 LayerNorm 的全部区别。"
                       "由 rstd 反推。",
        "rstd": "rstd = 1 / sqrt(mean_square + eps)，保存在 ctx 中（eps 在根号内）。",
        "xhat": "xhat = x * rstd，保存在 ctx 中：每一行的均方根约为 1。",
        "y": "输出 y = xhat * w，形状 (B, T, C)。",
        "dx": "dL/dx：与 LayerNorm 的公式相同，只是少了 mean(g) 这一项，因为前向时没有减均值。",
        "dw": "dL/dw：G * xhat，对所有 token 求和。",
    },
    "gelu": {
        "title": "GELU 激活（ops/activation.py）",
        "x": "输入 x，形状任意；GELU 对每个数单独作用。",
        "slope_none": "局部斜率 d out / d x = Phi(x) + x phi(x)：Phi(x) 是标准正态变量小于 x 的概率，"
                      "phi 是它的密度。在前向里算好并保存在 ctx 中，反向只需一次乘法。",
        "slope_tanh": "GPT-2 tanh 形式的局部斜率 g (1 + x (1 - g) 2 du/dx)，其中门 g = sigmoid(2u) "
                      "与 Phi(x) 非常接近且不需要 erf。在前向里算好并保存在 ctx 中，反向只需一次乘法。",
        "out_none": "out = x * Phi(x)：一条平滑的 ReLU，在 x = -0.75 附近略低于 0。",
        "out_tanh": "out = x * gate（tanh 近似）：与精确 GELU 的差约在 1e-3 以内。",
        "dx": "dL/dx = G * slope，即前向保存的局部斜率：x = 0 处为 0.5，x 约为 1.5 时"
              "略大于 1，x 很负时趋于 0。",
    },
    "silu": {
        "title": "SiLU / swish 激活（ops/activation.py）",
        "x": "输入 x，形状任意；SiLU 对每个数单独作用。",
        "sigmoid": "sigmoid(x) = 1 / (1 + exp(-x))，保存在 ctx 中，反向时不必再算一次 exp。",
        "out": "out = x * sigmoid(x)：x 很负时接近 0，x 很大时接近 x。",
        "dx": "dL/dx = G * s * (1 + x * (1 - s))，其中 s = sigmoid(x)。",
    },
    "swiglu": {
        "title": "SwiGLU 门控激活（ops/swiglu.py）",
        "gate": "门分支 (B, T, F)：在 LLaMA 的 MLP 中就是 x @ w_gate。",
        "up": "上分支 (B, T, F)：x @ w_up，对 token 的另一个纯线性视角。",
        "sigmoid": "sigmoid(gate)，取自 SiLU 的 ctx。",
        "activated": "silu(gate) = gate * sigmoid(gate)，保存在 ctx 中：决定每个 up 单元"
                     "能通过多少。",
        "out": "out = silu(gate) * up，逐元素相乘；之后 MLP 再用 w_down 投影回去。",
        "dup": "dL/dup = G * silu(gate)：对上分支来说，门就是一个固定的乘数。",
        "dgate": "dL/dgate：把 G * up 沿 SiLU 的斜率传回去。",
    },
    "softmax": {
        "title": "Softmax（ops/softmax.py）",
        "x": "分数 x：softmax 沿最后一维计算，每一行得到一个概率分布。",
        "probs": "probs：每行先减去最大值，取指数，再除以行和。所有元素为正，每行和为 1。"
                 "保存在 ctx 中，反向只需要它。",
        "x_shifted": "同样的分数再加 1000。即使在 float64 下 exp(1000) 也是 inf。",
        "probs_shifted": "平移后分数的 softmax：概率完全相同，也没有溢出，因为取指数前先减去了"
                         "行最大值。",
        "dx": "dL/dx = p * (G - sum(G * p))，逐行计算，不构造雅可比矩阵。当 G 全为 1 时结果"
              "恰好为 0：概率之和永远是 1，所以它的和不会变。",
    },
    "cross_entropy": {
        "title": "交叉熵损失（ops/cross_entropy.py）",
        "logits": "logits (B, T, V)：每个位置对每个类别给出一个未归一化的分数。",
        "targets": "目标 (B, T)：每个位置的正确类别。",
        "log_probs": "log_softmax(logits)，用 log-sum-exp 计算，不会溢出。损失的 ctx 保存的是"
                     "概率而不是它，所以这里调用 log_softmax_forward 得到。",
        "picked": "每个位置上目标类别的对数概率，直接从 log_probs 里取出。",
        "n_valid": "参与平均的位置个数（目标等于 ignore_index 的位置不算）。取自 ctx。",
        "loss": "loss = -mean(picked)：一个数；均匀乱猜时约为 log(V)。",
        "probs": "softmax(logits)，保存在 ctx 中供反向使用。",
        "onehot": "把目标写成 one-hot 行，方便与 dlogits 对照。",
        "G_loss": "上游梯度 dL/dloss：损失是一个数，所以 G 也是一个数。",
        "dlogits": "dL/dlogits = (probs - onehot) * G / n_valid：softmax 与 log 相互抵消，"
                   "只剩“预测减去目标”。每一行之和为 0。",
    },
    "embedding": {
        "title": "嵌入查表（ops/embedding.py）",
        "table": "嵌入表 (V, C)：V 个 id 各对应一行可学习的 C 个数。",
        "ids": "id (B, T)：[0, V) 中的整数。下面特意让其中一个 id 出现两次。",
        "out": "out = table[ids]：每个 id 复制出自己的那一行。等价于 one-hot(ids) @ table，"
               "但不需要真的构造 one-hot 矩阵。",
        "dtable": "dL/dtable：G 的每一行加到它的 id 所选中的那一行上，用 np.add.at 实现，"
                  "重复的 id 会累加（普通的 `dtable[ids] += G` 只会保留其中一次）。",
        "repeated_id": "id {id} 被查了不止一次。",
        "repeated_at": "id {id} 出现的位置，以 (批次, 位置) 表示。",
        "repeated_G": "这些位置上 G 的行：它们都流向嵌入表的第 {id} 行。",
        "repeated_dtable": "dtable[{id}]：上面这些行之和。",
        "unused_ids": "没有被查到的 id：它们在 dtable 中的行恰好为 0。",
    },
    "rope": {
        "title": "旋转位置编码 RoPE（ops/rope.py）",
        "positions": "位置 0 .. T-1，每个 token 一个。",
        "cos": "cos 表 (T, D)：第 i 对通道（i 与 i + D/2）旋转的角度是 pos * theta^(-2i/D)；"
               "靠前的通道对转得快，靠后的转得慢。取自 ctx。",
        "sin": "同样角度的 sin 表。取自 ctx。",
        "q": "旋转之前的查询 q (B, H, T, D)。",
        "q_rot": "RoPE 之后的 q：第 t 个 token 的每对通道都按位置 t 的角度旋转。向量长度不变，"
                 "只改变方向。",
        "q_fixed": "为了验证关键性质：把同一个查询向量放到每一个位置上。",
        "k_fixed": "再把同一个键向量放到每一个位置上。",
        "scores_fixed": "旋转后的副本两两相乘得到的分数：每条对角线上的值都相同，所以分数只取决于"
                        "两个 token 相隔多远。",
        "score": "位置 {m} 的 q 与位置 {n} 的 k 的点积（相距 {offset}）。",
        "dq": "dL/dq：把 G 按相同角度转回去（旋转 -angle），因为旋转矩阵的转置就是它的逆。",
    },
}

OPS_STEPS = {"en": OPS_EN, "zh": OPS_ZH}
