"""Notebook 9: serving a model: the shared KV cache of continuous batching drawn step by step,
a local `glassformer serve` called with the openai client, and one request at a time measured
against eight at once."""
from glassformer.notebooks.cells import code, md, setup

CELLS = [
    md("""
# 9 · Serving a model: continuous batching

`generate` writes one reply. A server writes many at once, for people who arrive whenever they
like and want replies of different lengths. Producing one token costs one forward pass, and that
pass reads every weight of the model whether it computes one row or eight. So a server should put
every reply in flight into the same forward, and let requests join and leave between steps:
that is *continuous batching*.

The hard part is the KV cache. A forward writes one column of the cache for all its rows at once,
but the rows belong to requests that started at different times. Below we step glassformer's
serving engine by hand on a small model and draw its cache after every step: which row is whose,
which columns hold which tokens, who joins, who leaves. Then we start a real `glassformer serve`,
call it with OpenAI's own Python client, and time one request at a time against eight at once.
The whole notebook runs in about 30 seconds on a laptop CPU (under 90 on a busy 2-core machine).
""", """
# 9 · 部署模型：连续批处理

`generate` 一次写一个回复。服务器要同时写很多个：用户随时到来，要的回复有长有短。每生成一个词元要做一次
前向传播，而这次前向传播无论算一行还是八行，都要把模型的每个权重读一遍。所以服务器应该把所有正在进行的
回复放进同一次前向传播里，并让请求在两步之间随时加入、随时离开：这就是*连续批处理*（continuous batching）。

难点在 KV 缓存。一次前向传播为所有行同时写缓存的同一列，可这些行属于不同时刻开始的请求。下面我们在一个
小模型上手动一步一步地驱动 glassformer 的推理引擎，每一步之后把缓存画出来：哪一行属于谁，哪些列存着哪些
词元，谁加入，谁离开。然后启动一个真正的 `glassformer serve`，用 OpenAI 官方的 Python 客户端调用它，
并比较一次处理一个请求和同时处理八个请求的速度。整个笔记本在笔记本电脑的 CPU 上大约 30 秒跑完
（在繁忙的双核机器上也不到 90 秒）。
"""),
    setup(),
    code("""
import re
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from glassformer.cli import main as glassformer_cli   # the `glassformer` command, run in this kernel

WORK = Path(tempfile.mkdtemp(prefix="glassformer-course-"))
RUN = WORK / "tiny-gpt"
"""),
    md("""
## A small model to serve

The tiny GPT of notebook 3, with a context of 64 characters so that a prompt and a reply of 48
fit: 200 steps, a few seconds. How well it writes does not matter here; what it costs per step
does. Each character is one token, so the cache pictures below can show the text itself.
""", """
## 一个用来部署的小模型

就是第 3 课的小 GPT，上下文取 64 个字符，好让一个提示加上 48 个字符的回复放得下：训练 200 步，几秒钟。
它写得好不好在这里无关紧要，要紧的是它每一步的开销。一个字符就是一个词元，所以下面的缓存图能直接显示文字。
"""),
    code("""
status = glassformer_cli(["train", "--data", "tinyshakespeare", "--out", str(RUN), "--n-layer", "2", "--n-head", "4",
                          "--d-model", "64", "--block-size", "64", "--batch-size", "16",
                          "--max-iters", "200", "--warmup-iters", "20", "--lr", "3e-3",
                          "--lr-decay-iters", "200", "--eval-interval", "200", "--eval-iters", "2",
                          "--workers", "1", "--no-progress", "--seed", "0"])
assert status == 0
model = glassformer.load_pretrained(RUN)
tok = model.tokenizer
print(model)
"""),
    md("""
## The engine, stepped by hand

`glassformer serve` keeps one KV cache for everyone (`glassformer/serve/rows.py`): `max_batch`
rows of `max_len` columns, allocated once. The columns are a **shared timeline**: one decode step
writes column `length` in every row, then `length` grows by one. Each row also keeps a mask,
`live`, of the columns that hold its own tokens; that mask is the attention mask of each forward,
and each row counts its positions from its own tokens, so a row computes exactly what it would
compute alone.

The engine (`serve/engine.py`) normally runs in a worker thread. Here we build it with 3 rows of
16 columns, do not start its thread, and call `engine.step()` ourselves. One step:

1. drops the rows whose client left;
2. **admits** waiting requests into free rows: their prompts are run together in a small cache
   of their own and copied into their rows so that they *end* at column `length`;
3. runs **one decode step** for every running row; a row that has its last token leaves.

A request is a `Sequence`: its prompt ids, how to choose tokens (greedy here: temperature 0) and
how many to write. Its text comes back through `on_event`, as it would to a client.
""", """
## 手动驱动推理引擎

`glassformer serve` 为所有请求只保留一个 KV 缓存（`glassformer/serve/rows.py`）：`max_batch` 行、
`max_len` 列，一次分配好。这些列是一条**共享的时间线**：一次解码步在每一行都写入第 `length` 列，然后
`length` 加一。每一行还保存一个掩码 `live`，标出哪些列存的是它自己的词元；这个掩码就是每次前向传播的
注意力掩码，而且每一行只数自己的词元来算位置，所以每一行算出的结果和它单独运行时完全一样。

推理引擎（`serve/engine.py`）平时在一个工作线程里运行。这里我们用 3 行、16 列来构建它，不启动它的线程，
而是自己调用 `engine.step()`。一步包括：

1. 丢掉客户端已经离开的行；
2. 把等待中的请求**接纳**进空闲的行：它们的提示放在一个单独的小缓存里一起计算，再复制进各自的行，
   让提示正好*结束*在第 `length` 列；
3. 为每个正在运行的行做**一次解码步**；拿到最后一个词元的行离开。

一个请求就是一个 `Sequence`：它的提示 id、选词方式（这里是贪心解码：温度 0）以及要写多少个词元。
它的文字通过 `on_event` 返回，和发给客户端的一样。
"""),
    code("""
from glassformer.generate.sampling import Sampling
from glassformer.serve import timeline
from glassformer.serve.engine import Engine
from glassformer.serve.sequence import Delta, Sequence, Settings

engine = Engine(model, max_batch=3, max_queue=8, max_len=16)   # its thread is never started
requests, replies = {}, {}

def submit(label, prompt, max_tokens):
    replies[label] = ""
    def on_event(event):                     # what the server would send to the client
        if isinstance(event, Delta):
            replies[label] += event.text
    settings = Settings(max_tokens, Sampling(temperature=0.0))
    requests[label] = Sequence(0, tok.encode(prompt), settings, frozenset(), tok, on_event)
    engine.submit([requests[label]])

print(engine.rows.cache.k[0].shape, "= (rows, KV heads, columns, head dim) per layer")
"""),
    md("""
Four requests arrive: A and B before step 1, C before step 2, and D before step 4. D's prompt,
`ROMEO: O`, begins with A's whole prompt, as the next turn of a chat begins with the last one.
After each step, `timeline.rows_at` reads the cache: per row, the token in each live column and
whose it is.
""", """
四个请求陆续到来：A 和 B 在第 1 步之前，C 在第 2 步之前，D 在第 4 步之前。D 的提示 `ROMEO: O` 以 A 的
整个提示开头，就像聊天的下一轮以上一轮开头一样。每一步之后，`timeline.rows_at` 读取缓存：每一行里每个
有效列存的是哪个词元，属于谁。
"""),
    code("""
ARRIVALS = {1: [("A", "ROMEO:", 3), ("B", "JULIET:", 9)],   # step -> (label, prompt, max_tokens)
            2: [("C", "KING:", 12)],
            4: [("D", "ROMEO: O", 4)]}
pictures = []
for step in range(1, 30):
    for label, prompt, max_tokens in ARRIVALS.get(step, []):
        submit(label, prompt, max_tokens)
    engine.step()
    pictures.append(timeline.rows_at(engine, requests, step, pictures[-1] if pictures else None))
    if not engine.busy() and not engine.waiting:
        break
print(timeline.text(pictures[:4], lang=LANG))
"""),
    md("""
Every step drawn, each request in its own colour. The red column number is `length`, the column
the next step writes. A free row's cells are faded: it keeps the ids of the request it served,
named in lower case.
""", """
每一步都画出来，每个请求一种颜色。红色的列号是 `length`，也就是下一步要写的列。空闲行的格子颜色变淡：
它还保留着上一个请求的 id，用小写字母标出。
"""),
    code("""
timeline.view(pictures, lang=LANG)
"""),
    md("""
## Reading the picture, step by step

- **Step 1.** A and B join together: their prompts (6 and 7 ids) are run in one small cache,
  left-padded to the same width, and copied in so that both end at column 6. The first token
  of each reply comes from that prefill; the decode step feeds it and writes column 7 in both
  rows. `length` is now 8.
- **Step 2.** C joins row 2. Its prompt is prefilled alone and placed to end at column 7, beside
  the others' first reply tokens, so the decode step writes column 8 for all three rows: nobody
  waited for C's prompt, and C did not compute anyone else's. A has its 3 tokens and leaves. Its
  last token was never fed to the model, so it is not in the cache.
- **Step 4.** D goes to row 0 because row 0 still holds `ROMEO:`: those 6 ids' keys and values
  are copied, not recomputed (`cached_tokens` in the server's reply). Only ` O` is run.
- **Steps 6 and 8.** D and B leave; C goes on alone.
- **Step 10.** The timeline is full (16 columns). Before the decode step, every running row's live
  columns are moved to the left, as one gather per layer, and the free rows are forgotten.
  `length` drops from 16 to 14 and C carries on.

Greedy replies written this way, in the same forward as strangers, are the ones `generate` writes
for each prompt alone:
""", """
## 一步一步读这张图

- **第 1 步。** A 和 B 一起加入：它们的提示（6 个和 7 个 id）放进同一个小缓存里计算，左侧补齐到同样的宽度，
  再复制进来，两者都结束在第 6 列。每个回复的第一个词元来自这次预填充；解码步把它喂进去，
  在两行都写入第 7 列。此时 `length` 为 8。
- **第 2 步。** C 加入第 2 行。它的提示单独预填充，放在结束于第 7 列的位置，与另外两行回复的第一个词元对齐，
  于是解码步为三行一起写入第 8 列：谁也没有等 C 的提示，C 也不用计算别人的提示。A 已经拿到 3 个词元，离开。
  它的最后一个词元从来没有喂给模型，所以不在缓存里。
- **第 4 步。** D 被分到第 0 行，因为第 0 行还保留着 `ROMEO:`：这 6 个 id 的键和值直接复制，不用重算
  （服务器回复里的 `cached_tokens`）。只需计算 ` O`。
- **第 6 步和第 8 步。** D 和 B 离开；C 独自继续。
- **第 10 步。** 时间线满了（16 列）。在解码步之前，每个正在运行的行的有效列整体左移，每层一次 gather，
  空闲行被清掉。`length` 从 16 降到 14，C 继续写。

这样写出来的贪心回复，虽然和陌生人挤在同一次前向传播里，却和 `generate` 为每个提示单独写出的完全一样：
"""),
    code("""
from glassformer.generate.generate import generate

def alone(prompt, max_tokens):
    ids = [int(step[0]) for step in generate(model, [tok.encode(prompt)],
                                             max_new_tokens=max_tokens, temperature=0.0)]
    return tok.decode(ids)

same = {}
for step_arrivals in ARRIVALS.values():
    for label, prompt, max_tokens in step_arrivals:
        same[label] = replies[label] == alone(prompt, max_tokens)
        print(f"{label} {prompt!r:12} -> {replies[label]!r:16} same as alone: {same[label]}")
by_step = {p.step: p for p in pictures}
assert [j[:2] for j in by_step[1].joined] == [("A", 0), ("B", 1)]
assert by_step[2].joined == (("C", 2, 0),) and by_step[2].left == ("A",)
assert by_step[4].joined == (("D", 0, 6),) and requests["D"].cached_tokens == 6
assert by_step[10].moved and by_step[10].length == 14
assert all(same.values())
"""),
    md("""
## A real server, and OpenAI's client

`glassformer serve --model RUN` puts this engine behind OpenAI's HTTP API (`/v1/completions`,
`/v1/chat/completions`, `/v1/models`, ...), so any OpenAI client can call it. We start it as a
subprocess on 127.0.0.1; `--port 0` lets the system pick a free port, which the server's first
log line names. Ctrl-C (SIGINT) stops it cleanly; the `finally` makes sure it is stopped even
if a cell fails, so the notebook leaves no process behind.
""", """
## 真正的服务器，以及 OpenAI 的客户端

`glassformer serve --model RUN` 把这个推理引擎放在 OpenAI 的 HTTP 接口后面（`/v1/completions`、
`/v1/chat/completions`、`/v1/models` 等），任何 OpenAI 客户端都能调用它。我们把它作为子进程在 127.0.0.1
上启动；`--port 0` 让系统挑一个空闲端口，服务器的第一行日志会写出它。Ctrl-C（SIGINT）让它干净地退出；
`finally` 保证即使某个单元格出错，它也一定会被停掉，笔记本不会留下任何进程。
"""),
    code("""
from openai import OpenAI

@contextmanager
def serving(folder, max_batch=8):
    \"\"\"A `glassformer serve` process for `folder`; yields an OpenAI client and its log.\"\"\"
    log = WORK / f"serve-{time.monotonic_ns()}.log"
    with open(log, "w", encoding="utf-8") as sink:
        command = [sys.executable, "-m", "glassformer", "serve", "--model", str(folder),
                   "--host", "127.0.0.1", "--port", "0", "--max-batch", str(max_batch)]
        server = subprocess.Popen(command, stdout=sink, stderr=sink)
    try:
        deadline = time.monotonic() + 60
        first_line = r"at (http://[\\d.]+:\\d+)/v1"        # "... at http://127.0.0.1:PORT/v1"
        while not (found := re.search(first_line, log.read_text(encoding="utf-8"))):
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the server did not start:\\n" + log.read_text(encoding="utf-8"))
            time.sleep(0.1)
        yield OpenAI(base_url=found.group(1) + "/v1", api_key="none needed"), log
    finally:
        server.send_signal(signal.SIGINT)            # Ctrl-C: finish what is in flight, then exit
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
"""),
    md("""
The client's calls, as you would make them to any OpenAI-compatible server. The model's id is
the run folder's name. A completion returns its text and its `usage`; `seed` makes a sampled reply
repeatable. The second, identical request lands in the row the first one left, which still holds
`ROMEO:`: 5 of its 6 prompt ids are reused (the last one must be fed again, since its logits
choose the first new token). `stream=True` gives the reply piece by piece as the engine writes
it. Each request is one line of the server's log.
""", """
客户端的调用方式和调用任何兼容 OpenAI 的服务器一样。模型的 id 就是运行目录的名字。一次补全返回文字和
`usage`；`seed` 让采样出的回复可以复现。第二个完全相同的请求落在第一个请求留下的那一行，那一行还保留着
`ROMEO:`：提示的 6 个 id 里有 5 个被复用（最后一个必须重新喂进去，因为要靠它的 logits 选出第一个新词元）。
`stream=True` 让回复随着引擎写出一段一段地返回。每个请求在服务器日志里占一行。
"""),
    code("""
with serving(RUN) as (client, log):
    model_id = client.models.list().data[0].id
    print("models:", model_id)
    reply = client.completions.create(model=model_id, prompt="ROMEO:", max_tokens=40,
                                      temperature=0.8, seed=1)
    again = client.completions.create(model=model_id, prompt="ROMEO:", max_tokens=40,
                                      temperature=0.8, seed=1)
    for answer in (reply, again):
        usage = answer.usage
        print(repr(answer.choices[0].text), answer.choices[0].finish_reason, "| prompt",
              usage.prompt_tokens, "cached", usage.prompt_tokens_details.cached_tokens,
              "| completion", usage.completion_tokens)
    assert again.choices[0].text == reply.choices[0].text          # same seed, same reply
    assert again.usage.prompt_tokens_details.cached_tokens == 5    # ROMEO: but its last id
    pieces = []
    for chunk in client.completions.create(model=model_id, prompt="JULIET:", max_tokens=24,
                                           temperature=0.8, seed=2, stream=True):
        if chunk.choices and chunk.choices[0].text:
            pieces.append(chunk.choices[0].text)
    print(len(pieces), "streamed pieces:", pieces[:8], "...")
print(*log.read_text(encoding="utf-8").splitlines()[-4:], sep="\\n")
"""),
    md("""
## One at a time, or together

Now the point of all this. The same 16 requests (48 tokens each, sampled with a seed, so both
ways write the same tokens) go to one server twice: first one at a time, then from 8 client
threads at once, each starting its next request when its last one ends. The server has
`--max-batch 8` rows, so 8 requests share each decode step.
""", """
## 一个一个来，还是一起来

现在来看这一切的意义。同样的 16 个请求（每个 48 个词元，带种子采样，所以两种方式写出的词元相同）
发给同一个服务器两次：第一次一个一个地发，第二次从 8 个客户端线程同时发，每个线程上一个请求结束就发下一个。
服务器有 `--max-batch 8` 行，所以 8 个请求共享每一次解码步。
"""),
    code("""
PROMPTS = ["ROMEO:", "JULIET:", "KING HENRY:", "First Citizen:"]
REQUESTS, TOKENS, CLIENTS = 16, 48, 8

def one(client, k):
    reply = client.completions.create(model=model_id, prompt=PROMPTS[k % len(PROMPTS)],
                                      max_tokens=TOKENS, temperature=0.8, seed=k)
    return reply.usage.completion_tokens

def tokens_per_second(client, clients):
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=clients) as pool:
        tokens = sum(pool.map(lambda k: one(client, k), range(REQUESTS)))
    return tokens, tokens / (time.perf_counter() - start)

with serving(RUN, max_batch=CLIENTS) as (client, log):
    one(client, 0)                                           # warm up
    alone_tokens, alone_speed = tokens_per_second(client, 1)
    together_tokens, together_speed = tokens_per_second(client, CLIENTS)
ratio = together_speed / alone_speed
print(f"one at a time: {alone_tokens} tokens at {alone_speed:7.1f} tokens/s")
print(f"{CLIENTS} at once:     {together_tokens} tokens at {together_speed:7.1f} tokens/s")
print(f"batched / one at a time: {ratio:.2f}x")
assert alone_tokens == together_tokens == REQUESTS * TOKENS
assert ratio >= 2.0
"""),
    code("""
%matplotlib inline
try:
    import matplotlib.pyplot as plt
    plt.figure(figsize=(5, 2.4))
    plt.barh(["one at a time", f"{CLIENTS} at once"], [alone_speed, together_speed],
             color=["#8a93a6", "#4e79a7"])
    plt.xlabel("tokens per second (all requests together)"); plt.tight_layout(); plt.show()
except ImportError:
    print("(pip install matplotlib to see the bars)")
"""),
    md("""
Why so much faster? A decode step of this tiny model is mostly Python and NumPy overhead per
operation, paid once per step whether the step carries one row or eight; with 8 rows, 8 replies
advance for nearly the price of one. Each request waits a little longer for its first token (it
shares steps), but all of them are done much sooner. A bigger model gains less, since its
matrix products, and each row's own attention, grow with the rows:
`python bench/serve.py` measured 5.2x on a 4-layer Shakespeare model and 2.4x on
SmolLM2-135M (`docs/performance.md`).
""", """
为什么快这么多？这个小模型的一次解码步，开销主要是每个运算在 Python 和 NumPy 里的固定成本，无论这一步
带一行还是八行都只付一次；有 8 行时，8 个回复几乎只花一个回复的代价就一起前进一步。每个请求拿到第一个
词元的时间会稍长一些（因为要和别人共享解码步），但所有请求都早得多地完成。更大的模型收益小一些，
因为它的矩阵乘法和每一行自己的注意力都会随行数增长：`python bench/serve.py` 在 4 层的莎士比亚模型上
测得 5.2 倍，在 SmolLM2-135M 上测得 2.4 倍（`docs/performance.md`）。
"""),
    code("""
RESULTS = {"same_as_alone": same, "cached_d": requests["D"].cached_tokens,
           "moved_at": [p.step for p in pictures if p.moved], "steps": len(pictures),
           "alone_tok_s": alone_speed, "together_tok_s": together_speed, "ratio": ratio}
RESULTS
"""),
]
