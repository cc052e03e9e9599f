"""Notebook 4: byte-level BPE trained and compared with GPT-2's; why Chinese looks garbled in
vocab files, and how glassformer shows it."""
from glassformer.notebooks.cells import code, md, setup

CELLS = [
    md("""
# 4 · Tokenizers: byte-level BPE

Models read ids, not text. Byte-level BPE (GPT-2, LLaMA 3, SmolLM2, Qwen2) starts from the 256
bytes and repeatedly merges the most frequent adjacent pair into a new token. We train one on
Shakespeare, compare it with GPT-2's 50,257 tokens, and see why Chinese characters come out as
`æ°´` in vocabulary files.
""", """
# 4 · 分词器：字节级 BPE

模型读的是编号，不是文字。字节级 BPE（GPT-2、LLaMA 3、SmolLM2、Qwen2）从 256 个字节出发，
不断把最常相邻出现的一对合并成新词元。我们在莎士比亚文本上训练一个，与 GPT-2 的 50,257 个词元比较，
再看看为什么中文字符在词表文件里会变成 `æ°´` 这样的乱码。
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
text = DATA.read_text(encoding="utf-8")[:200_000]
written = (WORK / "train.txt").write_text(text, encoding="utf-8")
"""),
    md("""
## Train a BPE with 512 tokens

256 byte tokens plus 256 merges. The first merges are the commonest pairs of English: a space and
`t`, `h` and `e`... (GPT-2 writes a space as `Ġ` in its files; more on that below).
""", """
## 训练一个 512 词元的 BPE

256 个字节词元，再加 256 次合并。最先合并的是英文里最常见的字符对：空格和 `t`、`h` 和 `e`……
（GPT-2 在文件里把空格写成 `Ġ`，下面会解释。）
"""),
    code("""
status = glassformer_cli(["tokenizer", "train", "--data", str(WORK / "train.txt"),
                          "--vocab-size", "512", "--out", str(WORK / "bpe512")])
assert status == 0
ours = glassformer.load_tokenizer(WORK / "bpe512")
gpt2 = glassformer.load_tokenizer("gpt2")
"""),
    md("""
## Ours against GPT-2's

On the same passage, the bigger vocabulary needs fewer tokens: more characters per token means
a longer text fits in the same context.
""", """
## 我们的与 GPT-2 的对比

同一段文字，词表越大，需要的词元越少：每个词元覆盖的字符越多，同样的上下文长度就能装下更长的文本。
"""),
    code("""
passage = text[:2000]
counts = {"ours (512)": len(ours.encode(passage)), f"gpt2 ({gpt2.vocab_size:,})": len(gpt2.encode(passage))}
for name, n in counts.items():
    print(f"{name:>14}: {n} tokens, {len(passage) / n:.2f} characters per token")
glassformer.tokenize(ours, "Before we proceed any further, hear me speak.").view(lang=LANG)
"""),
    code("""
glassformer.tokenize(gpt2, "Before we proceed any further, hear me speak.").view(lang=LANG)
"""),
    md("""
## Why Chinese looks garbled in vocab files

A Chinese character is 3 bytes of UTF-8: `水` is `E6 B0 B4`. GPT-2 did not want raw bytes such
as newlines or `0x80` in its JSON, so it maps each of the 256 bytes to a printable character:
printable ASCII and Latin-1 bytes stand for themselves, the others get characters from 256 on
(a space becomes `Ġ`). Read as text, the bytes of `水` are the three characters `æ°´`: the
"garbage" is the bytes, each spelled with its stand-in. Below we build that table (GPT-2's
`bytes_to_unicode`) and read a vocabulary entry back.
""", """
## 为什么中文在词表文件里是乱码

一个汉字在 UTF-8 里是 3 个字节：`水` 是 `E6 B0 B4`。GPT-2 不想在 JSON 里放换行、`0x80`
这样的原始字节，就给 256 个字节各找了一个可打印的替身：可打印的 ASCII 和 Latin-1 字节代表自己，
其余的从 256 号字符往后取（空格变成 `Ġ`）。把 `水` 的三个字节当作文字来读，就是 `æ°´` 三个字符：
所谓"乱码"其实就是字节，每个字节用它的替身写出来。下面我们把这张表（GPT-2 的 `bytes_to_unicode`）
建出来，再把词表里的一项读回原文。
"""),
    code("""
def bytes_to_unicode():
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    stand_in, extra = {}, 0
    for byte in range(256):
        if byte in keep:
            stand_in[byte] = chr(byte)
        else:
            stand_in[byte] = chr(256 + extra)
            extra += 1
    return stand_in


stand_in = bytes_to_unicode()
back = {char: byte for byte, char in stand_in.items()}
spelled = "".join(stand_in[b] for b in "水".encode("utf-8"))
print("水 ->", "水".encode("utf-8").hex(" "), "-> spelled in vocab.json as", spelled)
pieces = [gpt2.id_to_piece(i) for i in gpt2.encode("水很清")]
print("GPT-2's pieces of 水很清:", pieces)
print("read back:", bytes(back[c] for c in "".join(pieces)).decode("utf-8"))
assert spelled == "æ°´"
"""),
    md("""
GPT-2's merges cut `水` between two tokens: `æ°` (bytes `E6 B0`) and `´` (`B4`). Neither half is a
character, so decoding one token alone gives `�`. glassformer shows such a token as its bytes,
`⟨E6 B0⟩`, and boxes the tokens that make up one character together:
""", """
GPT-2 的合并把 `水` 切成了两个词元：`æ°`（字节 `E6 B0`）和 `´`（`B4`）。哪一半都不是完整的字，
单独解码只会得到 `�`。glassformer 把这样的词元显示成它的字节 `⟨E6 B0⟩`，并把拼成同一个字的词元框在一起：
"""),
    code("""
zh = glassformer.tokenize(gpt2, "水很清，月很明。")
print(zh)
zh.view(lang=LANG)
"""),
    md("""
A BPE trained on Chinese text learns whole characters (and pairs of them) as tokens, so the same
line takes fewer tokens:
""", """
在中文文本上训练的 BPE 会把整个汉字（甚至两个字）学成一个词元，同一行就用更少的词元：
"""),
    code("""
TANG = find_data("tang_quatrains.txt")
if TANG is None:
    print("note: ../shared/data/tang_quatrains.txt is absent: skipping the Chinese BPE")
    tang_tokens = None
else:
    written = (WORK / "tang.txt").write_text(TANG.read_text(encoding="utf-8")[:100_000], encoding="utf-8")
    status = glassformer_cli(["tokenizer", "train", "--data", str(WORK / "tang.txt"),
                              "--vocab-size", "1024", "--out", str(WORK / "tang1024")])
    tang = glassformer.load_tokenizer(WORK / "tang1024")
    vocab = json.loads((WORK / "tang1024" / "vocab.json").read_text(encoding="utf-8"))
    print("a few vocab.json entries:", list(vocab)[300:306])
    print("read back:", [bytes(back[c] for c in piece).decode("utf-8", errors="replace") for piece in list(vocab)[300:306]])
    tang_tokens = len(tang.encode("床前明月光，疑是地上霜。"))
    print("床前明月光，疑是地上霜。", "gpt2:", len(gpt2.encode("床前明月光，疑是地上霜。")), "tokens;", "ours:", tang_tokens)
"""),
    code("""
RESULTS = {"ours_tokens": counts["ours (512)"], "gpt2_tokens": len(gpt2.encode(passage)),
           "ours_vocab": ours.vocab_size, "gpt2_pieces_of_water": pieces[:2], "tang_tokens": tang_tokens}
RESULTS
"""),
]
