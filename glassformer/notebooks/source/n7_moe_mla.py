"""Notebook 7: Mixture of Experts (a router and its balance loss by hand, a tiny MoE
trained with and without it) and DeepSeek's latent attention: its cache against MHA and GQA."""
from glassformer.notebooks.cells import code, md, setup

CELLS = [
    md("""
# 7 · Mixture of Experts and latent attention

Two ideas carry today's large open models (Mixtral, Qwen3-MoE, DeepSeek-V3). **Mixture of
Experts**: the MLP of a block becomes E smaller MLPs, the *experts*, and a *router* sends each
token to only k of them, so the model holds many more weights than one token uses. **Multi-head
latent attention** (MLA, DeepSeek-V2 and V3): instead of every head's key and value, generation
keeps one small *latent* vector per token, from which the keys and values are rebuilt. We
route four tokens by hand, write the load-balancing loss, train a tiny MoE with and without it,
count the bytes a latent cache keeps per token, and check every gradient by finite differences.
""", """
# 7 · 混合专家与潜在注意力

如今的大型开源模型（Mixtral、Qwen3-MoE、DeepSeek-V3）靠两个想法撑起来。**混合专家（MoE）**：块里的 MLP
换成 E 个较小的 MLP，叫作*专家*，由一个*路由器*把每个词元只送给其中 k 个，于是模型拥有的权重远多于一个
词元用到的。**多头潜在注意力**（MLA，DeepSeek-V2 和 V3）：生成时不再保存每个头的键和值，而是每个词元只存
一个小小的*潜在向量*，键和值都从它重建。我们手算四个词元的路由，写出负载均衡损失，有和没有它各训练一个
小 MoE，数一数潜在缓存每个词元存多少字节，最后用有限差分校验每一个梯度。
"""),
    setup(),
    code("""
import json
import tempfile
from pathlib import Path
from glassformer.cli import main as glassformer_cli   # the `glassformer` command, run in this kernel
from glassformer.ops.moe_router import router_backward, router_forward
from glassformer.ops.load_balance import load_balance_backward, load_balance_forward

WORK = Path(tempfile.mkdtemp(prefix="glassformer-course-"))
"""),
    md("""
## A router by hand

A router is one matrix, `router` (C, E): each token's row `x` gives one logit per expert,
`logits = x @ router`. Here are the logits of four tokens over E = 4 experts, typed in. The
router then

1. turns each row into probabilities with a softmax,
2. keeps the k = 2 best experts of each token (top-k): only those two will run on it,
3. divides their two probabilities by their sum (renormalisation), so the token's output
   `y = w_1 expert_a(x) + w_2 expert_b(x)` is a weighted average of two experts' outputs.

glassformer's router, `router_forward`, must agree (Qwen3-MoE and Mixtral renormalise like this;
DeepSeek-V3 scores with a sigmoid, adds a bias used only to choose, and scales the weights: the
same function's options).
""", """
## 手算一个路由器

路由器就是一个矩阵 `router`（C, E）：每个词元的行向量 `x` 给每个专家一个 logit，`logits = x @ router`。
下面是四个词元在 E = 4 个专家上的 logits，直接手写。路由器接着

1. 对每一行做 softmax，得到概率；
2. 给每个词元留下最好的 k = 2 个专家（top-k）：只有这两个专家会处理它；
3. 把这两个概率除以它们的和（重新归一化），于是词元的输出 `y = w_1 expert_a(x) + w_2 expert_b(x)`
   是两个专家输出的加权平均。

glassformer 的路由器 `router_forward` 必须给出同样的结果（Qwen3-MoE 和 Mixtral 都这样重新归一化；
DeepSeek-V3 用 sigmoid 打分，加一个只用于挑选的偏置，再把权重乘上一个系数：都是同一个函数的选项）。
"""),
    code("""
logits = np.array([[2.0, 1.0, 0.1, -1.0],     # token 0: one logit per expert 0..3
                   [0.5, 2.5, 0.0, 0.2],      # token 1
                   [1.5, 0.3, 1.4, -0.5],     # token 2
                   [2.2, 0.1, -0.3, 1.9]])    # token 3                  (N, E) = (4, 4)
E, k = logits.shape[1], 2
probs = np.exp(logits - logits.max(axis=1, keepdims=True))
probs = probs / probs.sum(axis=1, keepdims=True)          # 1. softmax over the experts   (N, E)
chosen = np.argsort(-probs, axis=1)[:, :k]                # 2. top-2, best first          (N, k)
picked = np.take_along_axis(probs, chosen, axis=1)        #    their probabilities        (N, k)
weights = picked / picked.sum(axis=1, keepdims=True)      # 3. renormalised: rows sum to 1
print("probabilities:", probs, "chosen experts: " + str(chosen.tolist()), "weights:", weights, sep="\\n")
lib_weights, router_ctx = router_forward(logits, top_k=k, norm_topk_prob=True)
assert (router_ctx.indices == chosen).all() and np.allclose(lib_weights, weights)
"""),
    md("""
Token 0 goes to experts 0 and 1 with weights 0.731 and 0.269: its two probabilities, 0.638 and
0.235, divided by their sum 0.873. Expert 0 is among the chosen of **all four** tokens, expert 3
of one: the router already favours one expert, which is where the next section starts.
""", """
词元 0 去专家 0 和 1，权重 0.731 和 0.269：就是它的两个概率 0.638 和 0.235 各自除以它们的和 0.873。
专家 0 被**全部四个**词元选中，专家 3 只被一个选中：路由器已经偏爱某一个专家了，下一节就从这里讲起。
"""),
    md("""
## The whole MoE block, step by step

`explain moe` runs one block (5 tokens, 4 SwiGLU experts, top-2) and shows every step: the token
slots sorted by expert, so that each expert makes **one** matrix product for all its tokens (an
expert no token chose does nothing), the weighted sum, and the backward.
""", """
## 整个 MoE 块，一步一步

`explain moe` 运行一个块（5 个词元、4 个 SwiGLU 专家、top-2），把每一步都摆出来：词元槽位按专家排好序，
让每个专家对它的所有词元只做**一次**矩阵乘法（没有词元选中的专家什么也不做）、加权求和，以及反向传播。
"""),
    code("""
moe_trace = glassformer.trace("moe", grad="random")
print("finite-difference check of the block:", f"{moe_trace.check.max_rel_err:.1e}")
moe_trace.view(lang=LANG)
"""),
    md("""
## The load-balancing loss, and why it exists

Nothing in the language-model loss asks the router to spread the tokens. An expert chosen more
gets more gradient, gets better and is chosen even more; the others starve, their weights wasted
(and across devices, the busy expert's device does all the work). The Switch Transformer paper
(Fedus et al. 2021) adds a small loss that is least when the routing is even. For each expert e:

- `f_e`: the routed slots it received, per token (the k choices counted; the f sum to k);
- `P_e`: the router's mean probability for it, over the tokens (the P sum to 1);
- `loss = E · Σ_e f_e · P_e`.

Even routing gives `f_e = k/E` and `P_e = 1/E`, so the loss is exactly **k**. If every token picks
the same k experts, each of them has `f = 1` and the loss approaches **E**.
""", """
## 负载均衡损失，以及为什么需要它

语言模型的损失里没有任何一项要求路由器把词元分散开。被选得多的专家得到更多梯度、变得更好、于是被选得更多；
其余专家得不到训练，权重白白占着内存（分布在多台设备上时，繁忙专家所在的设备要干全部的活）。
Switch Transformer 论文（Fedus 等，2021）加了一个小损失，路由越均匀它越小。对每个专家 e：

- `f_e`：它收到的路由槽位数，按词元平均（k 个选择都计数；所有 f 加起来是 k）；
- `P_e`：路由器给它的平均概率，对词元取平均（所有 P 加起来是 1）；
- `loss = E · Σ_e f_e · P_e`。

完全均匀时 `f_e = k/E`、`P_e = 1/E`，损失恰好是 **k**。如果每个词元都挑同样的 k 个专家，它们各自 `f = 1`，
损失接近 **E**。
"""),
    code("""
f = np.bincount(chosen.ravel(), minlength=E) / len(logits)    # slots per token   (E,), sums to k
P = probs.mean(axis=0)                                        # mean probability  (E,), sums to 1
aux_by_hand = E * float(f @ P)
aux, aux_ctx = load_balance_forward(logits[None], chosen[None])     # one layer: (1, N, E), (1, N, k)
assert abs(float(aux) - aux_by_hand) < 1e-12
print("f =", f, " P =", P, f" loss = {aux_by_hand:.4f}")

even, _ = load_balance_forward(np.zeros((1, 4, E)), np.array([[[0, 1], [2, 3], [0, 1], [2, 3]]]))
crowded_logits = np.tile([2.0, 2.0, 0.0, 0.0], (1, 4, 1))          # every token prefers 0 and 1
crowded, _ = load_balance_forward(crowded_logits, np.tile([0, 1], (1, 4, 1)))
print(f"even routing: {float(even):.4f} (= k)   ours: {aux_by_hand:.4f}   "
      f"all on experts 0 and 1: {float(crowded):.4f} (towards E = {E})")
assert float(even) == k and float(even) < aux_by_hand < float(crowded) < E
"""),
    md("""
Our four tokens give 2.558: between k = 2 (even) and E = 4, since expert 0 takes a slot of every
token. Its gradient says how to fix that. The counts `f` are a step function of the logits (a
tiny nudge never changes which experts win), so only `P` carries gradient: `d loss / d P_e =
E f_e / N`, largest for the busiest expert, then through the softmax to the logits. Gradient
descent moves against it: expert 0's column is positive in every row, so every token's logit
for expert 0 goes down, and the others' go up.
""", """
我们这四个词元得到 2.558：介于 k = 2（均匀）和 E = 4 之间，因为专家 0 占了每个词元的一个槽位。
损失的梯度告诉我们怎么纠正。计数 `f` 是 logits 的阶梯函数（轻轻推一下，胜出的专家不会变），所以只有 `P`
有梯度：`d loss / d P_e = E f_e / N`，越忙的专家越大，再经过 softmax 传到 logits。梯度下降朝反方向走：
专家 0 那一列每一行都是正的，所以每个词元给专家 0 的 logit 都会下降，给其余专家的会上升。
"""),
    code("""
dlogits = load_balance_backward(np.array(1.0), aux_ctx)[0]            # (1, N, E) -> (N, E)
print("d loss / d logits:", dlogits, sep="\\n")
assert (dlogits[:, 0] > 0).all() and (dlogits[:, 1:] < 0).all()
"""),
    md("""
## A tiny MoE, trained with and without the loss

`glassformer train --arch moe` trains the `MOE` recipe (LLaMA's decoder, its MLPs 8 SwiGLU
experts, 2 per token) with the `moe-next-token` objective, whose `MoESettings` choose the balance:
`--balance aux` (the loss above per layer, times `--router-aux-coef` 0.1, added to the
cross-entropy) or `--balance none`. Made small (2 layers, width 64, context 32), it trains twice
for 100 steps from one seed, on Tiny Shakespeare when it is beside this repository. Every 20 steps
the log holds each layer's `expert_load`, each expert's share of the routed slots on held-out
text. The figure: the busiest expert's share over the even share 1/8 in the worse layer (1 is
even), then each expert's final share in each layer.
""", """
## 一个小 MoE，有和没有这个损失各训练一次

`glassformer train --arch moe` 用 `moe-next-token` 目标训练 `MOE` 配方（LLaMA 的解码器，MLP 换成 8 个
SwiGLU 专家、每个词元选 2 个），目标的 `MoESettings` 决定怎样均衡：`--balance aux`（上面的损失，每层一个，
乘以 `--router-aux-coef` 0.1 加到交叉熵上）或 `--balance none`。缩小后（2 层、宽度 64、上下文 32）用同一个
种子各训练 100 步；仓库旁边有 Tiny Shakespeare 就用它。每 20 步日志记下每层的 `expert_load`：留出文本上
每个专家拿到的路由槽位份额。图中先是较差那一层里最忙的专家的份额除以均匀份额 1/8（1 为均匀），再是训练
结束时每层每个专家的份额。
"""),
    code("""
from glassformer.train.objectives.moe_next_token import MoESettings
from glassformer.train.recipes import MOE

print("recipe:", {key: MOE.model[key] for key in ("n_experts", "experts_per_token", "expert_d_ff")})
print(MoESettings(), "|", MoESettings(balance="none"))
data_args = ["--data", "tinyshakespeare"]   # the corpus that ships inside glassformer


def train_moe(balance):
    run = WORK / balance
    status = glassformer_cli(["train", "--arch", "moe", "--balance", balance, *data_args,
                              "--out", str(run), "--n-layer", "2", "--n-head", "4", "--d-model", "64",
                              "--block-size", "32", "--batch-size", "16", "--max-iters", "100",
                              "--warmup-iters", "10", "--lr", "3e-3", "--lr-decay-iters", "100",
                              "--eval-interval", "20", "--eval-iters", "4", "--workers", "1",
                              "--no-progress", "--seed", "0"])
    assert status == 0
    return run


RUNS = {balance: train_moe(balance) for balance in ("aux", "none")}
evals = {balance: [json.loads(line) for line in (run / "train_log.jsonl").read_text().splitlines()
                   if "expert_load" in line] for balance, run in RUNS.items()}
steps = [row["iter"] for row in evals["aux"]]
n_experts = len(evals["aux"][0]["expert_load"][0])                         # 8
worst = {balance: [float(np.max(row["expert_load"])) * n_experts for row in rows]
         for balance, rows in evals.items()}
final = {balance: np.array(rows[-1]["expert_load"]) for balance, rows in evals.items()}   # (L, E)
for balance in RUNS:
    print(f"{balance:>4}: busiest / even share {worst[balance][-1]:.2f}, quietest expert "
          f"{final[balance].min():.3f}, val loss {evals[balance][-1]['val_loss']:.3f}")
try:
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.2))
    for balance in RUNS:
        axes[0].plot(steps, worst[balance], "o-", label=f"--balance {balance}")
    axes[0].axhline(1.0, color="gray", ls=":"); axes[0].legend()
    axes[0].set_xlabel("step"); axes[0].set_ylabel("busiest expert / even share")
    for ax, balance in zip(axes[1:], RUNS):
        for layer, load in enumerate(final[balance]):
            ax.bar(np.arange(n_experts) + 0.4 * layer, load, 0.4, label=f"layer {layer}")
        ax.axhline(1 / n_experts, color="gray", ls=":")
        ax.set_title(f"--balance {balance}"); ax.set_xlabel("expert"); ax.set_ylim(0, 0.5); ax.legend()
    axes[1].set_ylabel("share of routed slots"); plt.tight_layout(); plt.show()
except ImportError:
    print("(pip install matplotlib to see the figure)")
assert worst["none"][-1] > 2.0 and worst["aux"][-1] < 1.6
"""),
    md("""
Both runs start from the same random router, already uneven (step 0). Without the loss, one
expert of a layer takes more than 2 times its even share within 20 steps and another is all but
never chosen; with it, the loss pulls every expert back towards 1/8: by step 100 the busiest has
about 1.3 times the even share. The language-model losses barely differ in 100 steps
(`docs/moe.md` measures longer runs: at 600 steps, val loss 1.890 balanced, 1.896 not).
The page below is one forward pass of the unbalanced model: its experts view shows which experts
each character chose, and each layer's load.
""", """
两次训练从同一个随机路由器出发，一开始（第 0 步）就不均匀。没有这个损失时，不到 20 步某一层就有一个专家
拿到超过均匀份额 2 倍的槽位，另一个几乎从不被选中；有了它，损失把每个专家都拉回 1/8 附近：到第 100 步，
最忙的专家约为均匀份额的 1.3 倍。100 步里两者的语言模型损失相差无几（`docs/moe.md` 测了更长的训练：600 步时
验证损失均衡的 1.890，未均衡的 1.896）。下面的页面是未均衡模型的一次前向传播：它的专家视图显示每个字符选了哪些专家，
以及每层的负载。
"""),
    code("""
unbalanced = glassformer.load_pretrained(RUNS["none"])
cfg, moe_cfg = unbalanced.cfg, unbalanced.cfg.block_config().moe
expert_size = 3 * cfg.d_model * moe_cfg.expert_d_ff                       # w_gate, w_up, w_down
skipped = cfg.n_layer * (moe_cfg.n_experts - moe_cfg.experts_per_token)   # experts a token skips
per_token = unbalanced.num_params() - skipped * expert_size
print(f"{unbalanced.num_params():,} parameters; one token uses {per_token:,} of them")
glassformer.inspect(unbalanced, "ROMEO: What light").view(lang=LANG)
"""),
    md("""
## Latent attention: what the cache keeps

To generate, a model keeps the keys and values of every token it has seen, in every layer (the
KV cache). Per token and layer, multi-head attention (MHA) keeps H keys and H values of width D;
grouped-query attention (GQA) only those of its K < H key/value heads; MLA one normalised latent
`c` of width R and one RoPE key of width Dr, shared by every head (`wkv_b` makes each head's key
and value from `c`). For `bench/mla_decode.py`'s models (4 layers, 8 heads of width 64, float32;
MLA: R = 128, Dr = 16; GQA: K = 2) we count by hand, then ask the library: each family's
`KVLayout` (heads, key width, value width) and `KVCache.bytes_for`, which `model.cache_bytes`,
the server's memory budget and the bench use.
""", """
## 潜在注意力：缓存里存什么

生成时，模型要保存它见过的每个词元在每一层的键和值（KV 缓存）。每个词元每一层，多头注意力（MHA）存 H 个键
和 H 个值，宽度都是 D；分组查询注意力（GQA）只存它的 K < H 个键/值头的；MLA 只存一个宽度为 R 的归一化潜在
向量 `c` 和一个宽度为 Dr 的 RoPE 键，所有头共用（由 `wkv_b` 从 `c` 做出每个头的键和值）。以
`bench/mla_decode.py` 的模型为例（4 层、8 个宽 64 的头、float32；MLA：R = 128、Dr = 16；GQA：K = 2），
先手算，再问库：每个模型族的 `KVLayout`（头数、键宽、值宽）和 `KVCache.bytes_for`，
`model.cache_bytes`、服务端的内存预算和基准脚本用的都是它。
"""),
    code("""
from glassformer.blocks.kv_cache import KVCache, KVLayout
from glassformer.models import deepseek_v3, llama

L, H, D, FLOAT32 = 4, 8, 64, 4
R, Dr, K = 128, 16, 2
by_hand = {"mha": L * H * (D + D) * FLOAT32,      # every head's key and value
           "gqa": L * K * (D + D) * FLOAT32,      # 2 key/value heads, each shared by 4 queries
           "mla": L * (R + Dr) * FLOAT32}         # one latent and one RoPE key for all heads
SHAPE = dict(vocab_size=512, n_layer=4, n_head=8, d_model=512, d_ff=1376)   # bench/mla_decode.py's
configs = {"mha": (llama.FAMILY, llama.LlamaConfig(**SHAPE, n_kv_head=8, head_dim=64)),
           "gqa": (llama.FAMILY, llama.LlamaConfig(**SHAPE, n_kv_head=2, head_dim=64)),
           "mla": (deepseek_v3.FAMILY, deepseek_v3.DeepseekV3Config(
               **SHAPE, kv_lora_rank=128, qk_nope_head_dim=48, qk_rope_head_dim=16, v_head_dim=64))}
cache_bytes, layouts = {}, {}
for name, (family, model_cfg) in configs.items():
    layouts[name] = family.kv_layout(model_cfg)
    cache_bytes[name] = KVCache.bytes_for(layouts[name], layers=model_cfg.n_layer, rows=1, context=1)
    print(f"{name}: {layouts[name]}  {cache_bytes[name]:>6,} bytes per token  "
          f"{cache_bytes[name] / cache_bytes['mha']:.3f}x MHA")
assert cache_bytes == by_hand == {"mha": 16384, "gqa": 4096, "mla": 2304}   # the bench's figures
latent = KVCache.allocate(layouts["mla"], n_layer=4, batch=1, max_len=1024)
assert sum(a.nbytes for a in latent.k + latent.v) == 1024 * cache_bytes["mla"]   # a real cache agrees
"""),
    md("""
MLA keeps 0.14x of MHA's cache here and 0.56x of GQA's. At DeepSeek-V3's own size (61 layers, 128
heads, R = 512, Dr = 64, keys 128 + 64 and values 128 wide, 2-byte bf16) the difference is
what makes long contexts possible: `explain mla` ends with these three numbers, and we count
them again with `KVLayout`.
""", """
在这里 MLA 的缓存是 MHA 的 0.14 倍、GQA 的 0.56 倍。在 DeepSeek-V3 自己的尺寸上（61 层、128 个头、
R = 512、Dr = 64，键宽 128 + 64、值宽 128，2 字节的 bf16），这个差别决定了长上下文是否可行：`explain mla`
最后给出这三个数，我们用 `KVLayout` 再数一遍。
"""),
    code("""
V3 = {"mla": KVLayout(heads=1, key_dim=512, value_dim=64),
      "mha": KVLayout(heads=128, key_dim=128 + 64, value_dim=128),
      "gqa-8": KVLayout(heads=8, key_dim=128 + 64, value_dim=128)}
BF16 = np.float16                                                # 2 bytes, as bf16 (NumPy has none)
v3_bytes = {name: KVCache.bytes_for(layout, layers=61, rows=1, context=1, dtype=BF16)
            for name, layout in V3.items()}
mla_trace = glassformer.trace("mla", grad="random")
assert list(v3_bytes.values()) == mla_trace["cache_v3"].tolist()
for name, size in v3_bytes.items():
    print(f"{name:>5}: {size:>9,} bytes per token, {size * 128 * 1024 / 2**30:7.1f} GiB for 128k tokens")
mla_trace.view(lang=LANG)
"""),
    md("""
Is the latent really enough? A tiny random DeepSeek-V3 decodes 8 tokens one at a time, each step
reading only its latent cache (16 + 8 numbers per token and layer), and its logits equal those of
one full forward pass over all 8 tokens.
""", """
潜在向量真的够用吗？一个随机初始化的小 DeepSeek-V3 逐个解码 8 个词元，每一步只读它的潜在缓存（每个词元每层
16 + 8 个数），得到的 logits 与一次性前向传播全部 8 个词元的结果相同。
"""),
    code("""
from glassformer.models.model import Model

tiny_cfg = deepseek_v3.DeepseekV3Config(
    vocab_size=64, n_layer=2, n_head=4, d_model=64, d_ff=128, max_seq_len=32,
    kv_lora_rank=16, qk_nope_head_dim=16, qk_rope_head_dim=8, v_head_dim=16)
tiny = Model(tiny_cfg, deepseek_v3.FAMILY.init_params(tiny_cfg, np.random.default_rng(0)))
ids = np.random.default_rng(1).integers(0, 64, (1, 8))
full_logits = tiny(ids)                                    # (1, 8, V), no cache
cache = tiny.new_cache(1, 16)
steps_logits = []
for t in range(8):
    out, _ = tiny.forward(ids[:, t:t + 1], kv_cache=cache)  # one token, the latent cache read
    cache.advance(1)
    steps_logits.append(out)
decode_diff = float(np.abs(np.concatenate(steps_logits, axis=1) - full_logits).max())
print("cache arrays per layer:", cache.k[0].shape, cache.v[0].shape, " max |difference|:", decode_diff)
assert decode_diff < 1e-5
"""),
    md("""
## Checking the gradients

The router's backward passes gradient only to the k chosen probabilities (renormalised), then
through the softmax; MLA's passes through the latent projection `wkv_a`, its norm, the up-projection
`wkv_b` and the shared RoPE key (summed over the heads that read it). `glassformer.gradcheck`
compares each with central differences in float64: first our four tokens' router, then the
registered cases (the router's three routings, the balance loss, two MLA blocks).
""", """
## 校验梯度

路由器的反向传播只把梯度传给选中的 k 个概率（经过重新归一化），再穿过 softmax；MLA 的反向传播穿过潜在投影
`wkv_a`、它的归一化、上投影 `wkv_b`，以及共享的 RoPE 键（对读它的所有头求和）。`glassformer.gradcheck`
用 float64 的中心差分逐一比对：先是我们四个词元的路由器，再是登记在册的用例（路由器的三种路由方式、均衡
损失、两个 MLA 块）。
"""),
    code("""
from glassformer.gradcheck import gradcheck, run_case
from glassformer.gradcheck.cases import find_case

route = lambda inputs: router_forward(inputs["logits"], top_k=k, norm_topk_prob=True)   # (N, k)
route_backward = lambda dweights, ctx: {"logits": router_backward(dweights, ctx)[0]}    # (N, E)
checks = {"router, our 4 tokens": gradcheck(route, route_backward, {"logits": logits})["logits"]}
cases = {f"{name} {mode}": run_case(find_case(name, mode)) for name, mode in [
    ("moe_router", "softmax-top2"), ("moe_router", "softmax-top3-norm"), ("moe_router", "sigmoid-grouped"),
    ("moe_aux_loss", "top-2"), ("mla", "q-lora"), ("mla", "plain-q")]}
checks.update({key: case.max_rel_err for key, case in cases.items()})
checks.update({f"mla latent {name}": cases["mla q-lora"].per_input[name]       # the latent projection
               for name in ("attn.wkv_a", "attn.kv_norm.w", "attn.wkv_b")})
for name, err in checks.items():
    print(f"{name:<32} max relative error {err:.1e}")
assert max(checks.values()) < 1e-6
"""),
    code("""
RESULTS = {"router_weights": weights.tolist(), "aux_by_hand": aux_by_hand, "aux_even": float(even),
           "aux_crowded": float(crowded), "worst_load": {b: w[-1] for b, w in worst.items()},
           "val_last": {b: rows[-1]["val_loss"] for b, rows in evals.items()},
           "cache_bytes": cache_bytes, "cache_v3": list(v3_bytes.values()),
           "decode_diff": decode_diff, "gradcheck": checks}
RESULTS
"""),
]
