"""Notebook 2: one Transformer block, op by op: norms, RoPE, multi-head attention with GQA, the
MLP and the residual connections, each forward and backward gradchecked."""
from glassformer.notebooks.cells import code, md, setup

CELLS = [
    md("""
# 2 · One Transformer block

A block of GPT-2 or LLaMA is a handful of ops: a norm, multi-head attention, another norm, an MLP,
and two residual additions. Each op in glassformer is a pair of functions, a forward that returns
its output and a small `ctx`, and a backward that turns the output's gradient into the inputs'.
Here we write LayerNorm's pair by hand, then let `glassformer.trace` run every op of the block on
small random inputs and check its backward against finite differences in float64.
""", """
# 2 · 一个 Transformer 块

GPT-2 或 LLaMA 的一个块只由几个运算组成：归一化、多头注意力、再一次归一化、MLP，加上两次残差相加。
glassformer 里每个运算都是一对函数：前向返回输出和一个小小的 `ctx`，反向把输出的梯度变成输入的梯度。
这里我们先手写 LayerNorm 的一对函数，再用 `glassformer.trace` 在小的随机输入上运行块里的每个运算，
并在 float64 下用有限差分检查它的反向传播。
"""),
    setup(),
    md("""
## LayerNorm, forward and backward

`y = (x - mean) / sqrt(var + eps) * w + b` over the last axis (biased variance, eps inside the
square root, as torch). With `xhat` the normalized input and `g = dy * w`, the backward is
`dx = rstd * (g - mean(g) - xhat * mean(g * xhat))`, `dw = sum(dy * xhat)`, `db = sum(dy)`.
We run glassformer's trace (random inputs, a random upstream gradient G) and redo it by hand.
""", """
## LayerNorm 的前向与反向

沿最后一维：`y = (x - mean) / sqrt(var + eps) * w + b`（有偏方差，eps 在根号里，与 torch 一致）。
记 `xhat` 为归一化后的输入、`g = dy * w`，反向是
`dx = rstd * (g - mean(g) - xhat * mean(g * xhat))`，`dw = sum(dy * xhat)`，`db = sum(dy)`。
我们运行 glassformer 的 trace（随机输入、随机上游梯度 G），再亲手算一遍。
"""),
    code("""
ln = glassformer.trace("layer_norm", grad="random", seq=3, d_model=4)
x, w, b, G = ln["x"], ln["w"], ln["b"], ln["G"]
mean = x.mean(axis=-1, keepdims=True)
rstd = 1.0 / np.sqrt(((x - mean) ** 2).mean(axis=-1, keepdims=True) + 1e-5)
xhat = (x - mean) * rstd
y = xhat * w + b
g = G * w
dx = rstd * (g - g.mean(axis=-1, keepdims=True) - xhat * (g * xhat).mean(axis=-1, keepdims=True))
print("forward  differs by", np.abs(y - ln["y"]).max())
print("backward differs by", np.abs(dx - ln["dx"]).max(), np.abs((G * xhat).sum(axis=(0, 1)) - ln["dw"]).max())
ln.view(lang=LANG)
"""),
    md("""
## RMSNorm (LLaMA)

No mean, no bias: `y = x / sqrt(mean(x^2) + eps) * w`. Cheaper, and it works as well.
""", """
## RMSNorm（LLaMA）

不减均值、没有偏置：`y = x / sqrt(mean(x^2) + eps) * w`。更省计算，效果一样好。
"""),
    code("""
rms = glassformer.trace("rms_norm", grad="random")
x = rms["x"]
y = x / np.sqrt((x ** 2).mean(axis=-1, keepdims=True) + 1e-6) * rms["w"]   # eps 1e-6, as LLaMA
print("forward differs by", np.abs(y - rms["y"]).max())
print("check:", f"{rms.check.max_rel_err:.1e}")
"""),
    md("""
## RoPE: positions as rotations

LLaMA adds no position vectors. It rotates each pair of query and key coordinates by an angle
proportional to the position, so the score of a query at position m with a key at position n
depends only on `m - n`. The trace scores one fixed query against one fixed key at two pairs of
positions with the same distance (the scores are equal) and at a third pair with another distance
(the score differs).
""", """
## RoPE：把位置变成旋转

LLaMA 不加位置向量，而是把查询和键的每一对坐标旋转一个与位置成正比的角度，于是位置 m 的查询
与位置 n 的键的分数只取决于 `m - n`。trace 把同一个查询和同一个键放在两组距离相同的位置上打分
（分数相等），再放在距离不同的第三组位置上（分数不同）。
"""),
    code("""
rope = glassformer.trace("rope", grad="random")
print("same distance:", rope["score_a"], rope["score_b"], "  another distance:", rope["score_c"])
assert abs(rope["score_a"] - rope["score_b"]) < 1e-5
print("check:", f"{rope.check.max_rel_err:.1e}")
rope.view(lang=LANG)
"""),
    md("""
## Multi-head attention with grouped-query attention

`heads=4, kv_heads=2`: four query heads share two key/value heads (query head h reads KV head
h // 2), as LLaMA and SmolLM2 do to shrink the KV cache. Every head runs the attention of
notebook 1; the heads' outputs are concatenated and projected by `wo`.
""", """
## 多头注意力与分组查询注意力（GQA）

`heads=4, kv_heads=2`：4 个查询头共享 2 个键/值头（查询头 h 读键值头 h // 2），LLaMA 和
SmolLM2 都这样做，以缩小 KV 缓存。每个头都在做第 1 课的注意力；各头的输出拼接起来，再经过 `wo` 投影。
"""),
    code("""
mha = glassformer.trace("mha", grad="random", heads=4, kv_heads=2)
print("q heads", mha["q_heads"].shape, " k heads", mha["k_heads"].shape, " weights", mha["weights"].shape)
print("check:", f"{mha.check.max_rel_err:.1e}")
mha.view(lang=LANG)
"""),
    md("""
## The MLP: GELU (GPT-2) and SwiGLU (LLaMA)

GPT-2's MLP is `gelu(x @ w_up) @ w_down`; LLaMA's gates it: `(silu(x @ w_gate) * (x @ w_up)) @ w_down`.
""", """
## MLP：GELU（GPT-2）与 SwiGLU（LLaMA）

GPT-2 的 MLP 是 `gelu(x @ w_up) @ w_down`；LLaMA 加了门控：`(silu(x @ w_gate) * (x @ w_up)) @ w_down`。
"""),
    code("""
gelu = glassformer.trace("gelu", grad="random")
swiglu = glassformer.trace("swiglu", grad="random")
print("gelu check:", f"{gelu.check.max_rel_err:.1e}", "  swiglu check:", f"{swiglu.check.max_rel_err:.1e}")
"""),
    md("""
## The whole block, residuals included

`x + attn(norm1(x))`, then `+ mlp(norm2(...))`. In the backward, the residual stream's gradient
flows straight through each addition and the sub-block's gradient is added to it: the fan-out of
notebook 1 again.
""", """
## 整个块，包括残差

`x + attn(norm1(x))`，再 `+ mlp(norm2(...))`。反向时，残差流的梯度直接穿过每次相加，
子层的梯度再加上去：又是第 1 课里"一个输入分给多处，梯度相加"。
"""),
    code("""
block = glassformer.trace("block", grad="random")
checks = {name: t.check.max_rel_err for name, t in
          dict(layer_norm=ln, rms_norm=rms, rope=rope, mha=mha, gelu=gelu, swiglu=swiglu, block=block).items()}
for name, err in checks.items():
    print(f"{name:<10} max relative error {err:.1e}")
assert max(checks.values()) < 1e-6
block.view(lang=LANG)
"""),
    code("""
RESULTS = {"gradcheck": checks, "layer_norm_dx_diff": float(np.abs(dx - ln["dx"]).max()),
           "rope_scores": [float(rope["score_a"]), float(rope["score_b"]), float(rope["score_c"])]}
RESULTS
"""),
]
