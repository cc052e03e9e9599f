"""Notebook 3: a tiny GPT trained on Tiny Shakespeare in seconds: loss curve, samples, logit lens."""
from glassformer.notebooks.cells import code, md, setup

CELLS = [
    md("""
# 3 · Training a tiny GPT on Tiny Shakespeare

The blocks of notebook 2, stacked twice, trained with the backward passes written by hand and
AdamW, on the 1 MB of Shakespeare that nanoGPT and char-rnn learn from. One character is one
token. 300 steps take a few seconds on a laptop CPU: the loss falls from `ln 65 ≈ 4.17` (a uniform
guess over 65 characters) to about 2.4. Then we sample from it and look inside with the logit lens.
""", """
# 3 · 在 Tiny Shakespeare 上训练一个小 GPT

把第 2 课的块叠两层，用手写的反向传播和 AdamW 训练，数据是 nanoGPT 和 char-rnn 都用过的 1 MB
莎士比亚文本，一个字符就是一个词元。300 步在笔记本电脑的 CPU 上只要几秒：损失从
`ln 65 ≈ 4.17`（在 65 个字符里均匀瞎猜）降到 2.4 左右。然后让它写几行，再用 logit 透镜看看它的内部。
"""),
    setup(),
    code("""
import json
import tempfile
from pathlib import Path
from glassformer.cli import main as glassformer_cli   # the `glassformer` command, run in this kernel

RUN = Path(tempfile.mkdtemp(prefix="glassformer-course-")) / "tiny-gpt"
"""),
    md("""
## Train

`glassformer train` is the command-line recipe; here it runs in this kernel. Two layers, four
heads, width 64, context 32, batches of 16 windows, 300 AdamW steps (one process: `--workers 1`).
`--data tinyshakespeare` names the corpus that ships inside glassformer: nothing to download.
""", """
## 训练

`glassformer train` 是命令行里的训练配方，这里在当前内核里直接运行。两层、四个头、宽度 64、
上下文 32、每批 16 个窗口、300 步 AdamW（单进程：`--workers 1`）。`--data tinyshakespeare`
指的是随 glassformer 一起安装的语料，不用下载。
"""),
    code("""
status = glassformer_cli(["train", "--data", "tinyshakespeare", "--out", str(RUN), "--n-layer", "2", "--n-head", "4",
                 "--d-model", "64", "--block-size", "32", "--batch-size", "16", "--max-iters", "300",
                 "--warmup-iters", "20", "--lr", "3e-3", "--lr-decay-iters", "300",
                 "--eval-interval", "100", "--eval-iters", "5", "--workers", "1", "--no-progress",
                 "--seed", "0"])
assert status == 0
"""),
    md("""
## The loss curve

Every step's training loss is in the run's `train_log.jsonl`, and every 100 steps the loss on the
held-out 10% (val).
""", """
## 损失曲线

每一步的训练损失都记在运行目录的 `train_log.jsonl` 里，每 100 步还有留出的 10% 数据上的损失（val）。
"""),
    code("""
log = [json.loads(line) for line in (RUN / "train_log.jsonl").read_text().splitlines()]
steps = [row["iter"] for row in log if "train_loss" in row]
train_loss = [row["train_loss"] for row in log if "train_loss" in row]
val = [(row["iter"], row["val_loss"]) for row in log if "val_loss" in row]
print("val loss:", ", ".join(f"step {i}: {loss:.3f}" for i, loss in val))
try:
    import matplotlib.pyplot as plt
    plt.figure(figsize=(6, 3))
    plt.plot(steps, train_loss, label="train")
    plt.plot(*zip(*val), "o-", label="val")
    plt.xlabel("step"); plt.ylabel("loss (nats per character)"); plt.legend(); plt.show()
except ImportError:
    print("(pip install matplotlib to see the curve)")
assert val[-1][1] < val[0][1] - 1.0
"""),
    md("""
## Samples

The trained run folder is a model: `glassformer generate` samples from it, one character at a time
with a KV cache. After 300 steps it has learned names in capitals, line breaks and common short
words, not yet sense.
""", """
## 生成样例

训练好的运行目录就是一个模型：`glassformer generate` 从它采样，用 KV 缓存逐字生成。300 步后它学会了
大写的人名、换行和常见的短词，还说不出有意义的话。
"""),
    code("""
status = glassformer_cli(["generate", "--model", str(RUN), "--echo", "--max-new-tokens", "200",
                          "--top-k", "10", "--seed", "0", "ROMEO:"])
"""),
    md("""
## Inside the model: attention and the logit lens

`glassformer.inspect` runs one forward pass and reads everything from the ctx the backward would
use. Its page draws inline: the tokens, every head's attention, the logit lens (the final norm and
the unembedding applied after each layer: what the model would predict if it stopped there) and
the residual stream. Two inspections and a trace on one page stay independent: each lives in a
frame of its own.
""", """
## 模型内部：注意力与 logit 透镜

`glassformer.inspect` 运行一次前向传播，所有内容都从反向传播要用的 ctx 里读出。它的页面直接画在这里：
词元、每个头的注意力、logit 透镜（在每一层之后套上最终归一化和反嵌入：假如模型在这一层就停下，
它会预测什么）和残差流。同一页上的两个 inspect 和一个 trace 互不干扰：各自在自己的框里。
"""),
    code("""
model = glassformer.load_pretrained(RUN)
seen = glassformer.inspect(model, "ROMEO: What")
lens = seen.logit_lens(k=3)
for layer in range(lens.ids.shape[0]):
    guesses = [model.tokenizer.decode([int(i)]) for i in lens.ids[layer, 0, -1]]
    print(f"after layer {layer}: next character after 'What' -> {guesses}")
seen.view(lang=LANG)
"""),
    code("""
glassformer.inspect(model, "JULIET: O Romeo").view(lang=LANG)
"""),
    code("""
glassformer.trace("gpt2", ckpt=str(RUN), prompt="ROMEO:", grad=None).view(lang=LANG)
"""),
    code("""
RESULTS = {"val_first": val[0][1], "val_last": val[-1][1], "train_first": train_loss[0],
           "lens_layers": int(lens.ids.shape[0]),
           "data_sha256": json.loads((RUN / "data.json").read_text())["sha256"]}   # what it read
RESULTS
"""),
]
