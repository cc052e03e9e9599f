"""Notebook 1: self-attention by hand on the seed's 3-token example, forward and backward."""
from glassformer.notebooks.cells import code, md, setup

CELLS = [
    md("""
# 1 · Self-attention by hand

Three tokens, `d_model = 4`, projected to 2 dimensions: the toy example of the Chinese tutorial
*从零开始学大模型：Transformer核心架构* (§1.2). We compute it with NumPy, line by line: the
forward pass, a causal mask against none, then the backward pass, and we prove the gradients right
with finite differences. At the end glassformer shows the same numbers inline.
""", """
# 1 · 手算自注意力

3 个词元，`d_model = 4`，投影到 2 维：正是教程《从零开始学大模型：Transformer核心架构》§1.2
里的玩具例子。我们用 NumPy 一行一行地算：前向传播、有因果掩码和没有掩码的对比、反向传播，
最后用有限差分证明梯度是对的。结尾处 glassformer 会把同样的数字直接画在笔记本里。
"""),
    setup(),
    md("""
## The toy data

`X` holds 3 token vectors (batch 1, seq 3, d_model 4). `Wq`, `Wk`, `Wv` project each token to
what it looks for (query), what it offers to be found by (key) and what it passes on (value).
""", """
## 玩具数据

`X` 是 3 个词元向量（batch 1，seq 3，d_model 4）。`Wq`、`Wk`、`Wv` 把每个词元投影成：
它在找什么（查询 Q）、它凭什么被找到（键 K）、它能提供什么（值 V）。
"""),
    code("""
X = np.array([[[0.1, 0.2, 0.3, 0.4],
               [0.5, 0.4, 0.3, 0.2],
               [0.0, 0.1, 0.0, 0.1]]], dtype=np.float32)          # (B=1, T=3, C=4)
Wq = np.array([[0.2, -0.1], [0.0, 0.1], [0.1, 0.2], [-0.1, 0.0]], dtype=np.float32)  # (C, D=2)
Wk = np.array([[0.1, 0.1], [0.0, -0.1], [0.2, 0.0], [0.0, 0.2]], dtype=np.float32)
Wv = np.array([[0.1, 0.0], [-0.1, 0.1], [0.2, -0.1], [0.0, 0.2]], dtype=np.float32)

Q, K, V = X @ Wq, X @ Wk, X @ Wv                                  # (1, 3, 4) @ (4, 2) -> (1, 3, 2)
print("Q =\\n", Q[0], "\\nK =\\n", K[0], "\\nV =\\n", V[0])
"""),
    md("""
## Scores, the causal mask, softmax

Every query is compared with every key: `Q @ K^T`, scaled by `1/sqrt(d_k)` so that the scores do
not grow with the width. A decoder (GPT) may not look at later tokens: the causal mask sets the
scores above the diagonal to minus infinity, so softmax gives them weight 0. An encoder (BERT) is
bidirectional: no mask.
""", """
## 注意力分数、因果掩码、softmax

每个查询都和每个键比较：`Q @ K^T`，再乘以 `1/sqrt(d_k)`，让分数不随宽度变大。解码器（GPT）
不能看后面的词元：因果掩码把对角线以上的分数设为负无穷，softmax 之后这些位置的权重就是 0。
编码器（BERT）是双向的：没有掩码。
"""),
    code("""
scale = 1.0 / np.sqrt(Q.shape[-1])                                # 1/sqrt(2)
scores = (Q @ K.transpose(0, 2, 1)) * scale                       # (1, 3, 2) @ (1, 2, 3) -> (1, 3, 3)
mask = np.triu(np.ones((3, 3), dtype=bool), k=1)                  # True above the diagonal


def softmax(s):
    e = np.exp(s - s.max(axis=-1, keepdims=True))                  # minus the row max: no overflow
    return e / e.sum(axis=-1, keepdims=True)


weights = softmax(np.where(mask, -np.inf, scores))                 # causal
weights_bi = softmax(scores)                                       # bidirectional
print("causal weights =\\n", weights[0])
print("bidirectional weights =\\n", weights_bi[0])
assert abs(weights[0, 1, 0] - 0.4994) < 5e-5                       # the seed prints 0.4994
"""),
    md("""
Row 1 of the causal weights is the seed's `[0.4994 0.5006 0.]`: token 1 sees tokens 0 and 1
almost equally, and not token 2. In the bidirectional matrix every row has three non-zero weights.
The output is each row's weighted average of the value vectors:
""", """
因果权重的第 1 行正是教程里的 `[0.4994 0.5006 0.]`：词元 1 几乎平均地看词元 0 和 1，
看不到词元 2。双向矩阵每一行都有三个非零权重。输出就是按每一行的权重对值向量求加权平均：
"""),
    code("""
out = weights @ V                                                  # (1, 3, 3) @ (1, 3, 2) -> (1, 3, 2)
print(out[0])
"""),
    md("""
## Backward, by hand

Take a loss `L = sum(out * G)`; its gradient with respect to `out` is `G` itself (here all ones).
Going back through each line (`P` = the weights, `S` = the scores):

- `out = P @ V`:  `dP = G @ V^T`,  `dV = P^T @ G`
- softmax, row by row:  `dS = P * (dP - sum(dP * P, axis=-1))`  (masked entries have `P = 0`, so `dS = 0`)
- `S = Q @ K^T * scale`:  `dQ = dS @ K * scale`,  `dK = dS^T @ Q * scale`
- `Q = X @ Wq` (and K, V alike):  `dWq = X^T @ dQ`,  and `X` is used three times, so
  `dX = dQ @ Wq^T + dK @ Wk^T + dV @ Wv^T` (fan-out: the gradients add up)
""", """
## 手算反向传播

取损失 `L = sum(out * G)`，它对 `out` 的梯度就是 `G` 本身（这里全为 1）。沿着每一行往回推
（`P` 是权重，`S` 是分数）：

- `out = P @ V`：`dP = G @ V^T`，`dV = P^T @ G`
- 逐行 softmax：`dS = P * (dP - sum(dP * P, axis=-1))`（被掩码的位置 `P = 0`，所以 `dS = 0`）
- `S = Q @ K^T * scale`：`dQ = dS @ K * scale`，`dK = dS^T @ Q * scale`
- `Q = X @ Wq`（K、V 同理）：`dWq = X^T @ dQ`；`X` 被用了三次，所以
  `dX = dQ @ Wq^T + dK @ Wk^T + dV @ Wv^T`（一个输入分给三处，梯度相加）
"""),
    code("""
def attention_forward(X, Wq, Wk, Wv, causal=True):
    Q, K, V = X @ Wq, X @ Wk, X @ Wv
    scale = 1.0 / np.sqrt(Q.shape[-1])
    S = (Q @ K.transpose(0, 2, 1)) * scale
    T = X.shape[1]
    hidden = np.triu(np.ones((T, T), dtype=bool), k=1) if causal else np.zeros((T, T), dtype=bool)
    P = softmax(np.where(hidden, -np.inf, S))
    ctx = dict(X=X, Wq=Wq, Wk=Wk, Wv=Wv, Q=Q, K=K, V=V, P=P, scale=scale)   # what backward needs
    return P @ V, ctx


def attention_backward(G, ctx):
    P, V, Q, K, X, scale = ctx["P"], ctx["V"], ctx["Q"], ctx["K"], ctx["X"], ctx["scale"]
    dP = G @ V.transpose(0, 2, 1)                                  # (1, 3, 2) @ (1, 2, 3)
    dV = P.transpose(0, 2, 1) @ G
    dS = P * (dP - (dP * P).sum(axis=-1, keepdims=True))          # softmax's backward, per row
    dQ = dS @ K * scale
    dK = dS.transpose(0, 2, 1) @ Q * scale
    dWq = (X.transpose(0, 2, 1) @ dQ).sum(axis=0)                  # summed over the batch
    dWk = (X.transpose(0, 2, 1) @ dK).sum(axis=0)
    dWv = (X.transpose(0, 2, 1) @ dV).sum(axis=0)
    dX = dQ @ ctx["Wq"].T + dK @ ctx["Wk"].T + dV @ ctx["Wv"].T    # X feeds Q, K and V
    return dict(X=dX, Wq=dWq, Wk=dWk, Wv=dWv)


out, ctx = attention_forward(X, Wq, Wk, Wv)
G = np.ones_like(out)
grads = attention_backward(G, ctx)
print("dWq =\\n", grads["Wq"], "\\ndX =\\n", grads["X"][0])
"""),
    md("""
## The finite-difference check

Nudge one input entry by `±h`, recompute `L`, and `(L(+h) - L(-h)) / 2h` approximates that entry's
gradient. The scores here are tiny (about 0.01), so so are the gradients of `Wq` and `Wk`: we take
`h = 1e-4`, where float64's rounding (about `1e-16 / h`) stays far below them. A correct backward
then agrees to about `1e-9`; a wrong one is off by far more. We compare norms:
`|analytic - numeric| / (|analytic| + |numeric|)`.
""", """
## 有限差分校验

把某个输入元素加减 `h`，重新算 `L`，`(L(+h) - L(-h)) / 2h` 就近似这个元素的梯度。在 float64
里计算。这里的分数很小（约 0.01），`Wq`、`Wk` 的梯度也很小，所以取 `h = 1e-4`：float64 的
舍入误差（约 `1e-16 / h`）远小于梯度本身。正确的反向传播与它相差大约 `1e-9`；写错了会差得多。
我们比较范数：`|解析 - 数值| / (|解析| + |数值|)`。
"""),
    code("""
def finite_difference_check(causal, h=1e-4):
    inputs = {name: value.astype(np.float64) for name, value in dict(X=X, Wq=Wq, Wk=Wk, Wv=Wv).items()}
    out, ctx = attention_forward(causal=causal, **inputs)
    G = np.ones_like(out)
    analytic = attention_backward(G, ctx)
    errors = {}
    for name, value in inputs.items():
        numeric = np.zeros_like(value)
        for i in np.ndindex(value.shape):
            saved = value[i]
            value[i] = saved + h
            plus = (attention_forward(causal=causal, **inputs)[0] * G).sum()
            value[i] = saved - h
            minus = (attention_forward(causal=causal, **inputs)[0] * G).sum()
            value[i] = saved
            numeric[i] = (plus - minus) / (2 * h)
        diff = np.linalg.norm(analytic[name] - numeric)
        errors[name] = diff / (np.linalg.norm(analytic[name]) + np.linalg.norm(numeric))
    return errors


fd_errors = {mode: finite_difference_check(causal=(mode == "causal")) for mode in ("causal", "bidirectional")}
for mode, errors in fd_errors.items():
    print(mode, {name: f"{err:.1e}" for name, err in errors.items()})
assert max(max(e.values()) for e in fd_errors.values()) < 1e-6
"""),
    md("""
## The same, shown by glassformer

`glassformer.walkthrough()` is the seed's example as an interactive page (causal beside
bidirectional, forward and backward): it draws right here, with no network. `glassformer.trace`
runs one explained part, the library's own forward and backward, and its finite-difference check.
""", """
## glassformer 画出同样的计算

`glassformer.walkthrough()` 把教程的例子做成交互页面（因果与双向并排，前向和反向），
直接画在这里，不需要联网。`glassformer.trace` 运行一个讲解部件：库自己的前向、反向，
以及它的有限差分校验。
"""),
    code("""
glassformer.walkthrough(lang=LANG)
"""),
    code("""
trace = glassformer.trace("attention")
print("largest difference from our weights:", np.abs(trace["weights"] - weights).max())
print("largest difference from our dX:", np.abs(trace["dX"] - grads["X"]).max())
print("glassformer's check, max relative error:", f"{trace.check.max_rel_err:.1e}")
trace.view(lang=LANG)
"""),
    code("""
RESULTS = {"weight_1_0": float(weights[0, 1, 0]), "weight_1_1": float(weights[0, 1, 1]),
           "fd_max_rel_err": max(max(e.values()) for e in fd_errors.values()),
           "trace_max_rel_err": trace.check.max_rel_err,
           "trace_weights_diff": float(np.abs(trace["weights"] - weights).max())}
RESULTS
"""),
]
