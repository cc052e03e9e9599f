"""Notebook 8: learning from preferences (DPO) and rewards (GRPO), on Tang quatrains: the DPO
loss by hand and its ln 2, a few DPO steps plotted, GRPO's group advantages with the tang-form
reward, and samples before and after three small adapter runs beside the full recipe's figures.
This file holds the data, the model and the DPO loss; n8_runs.py the training runs (RUN_CELLS)."""
from glassformer.notebooks.cells import code, md, setup
from glassformer.notebooks.source.n8_runs import RUN_CELLS

CELLS = [
    md("""
# 8 · Learning from preferences and rewards

Notebooks 3 and 6 trained a model to imitate: every token of a reply was a target. This one
trains from two other kinds of signal. **DPO** reads a comparison: for this prompt, reply A is
better than reply B. **GRPO** reads a score: the model writes several replies, a function rates
each, and the replies that beat their siblings are made more likely. glassformer computes both as
TRL's trainers do, with the backward passes written by hand, and trains LoRA adapters with them.

The task is the one glassformer's alignment recipes train SmolLM2 on: a five-character Tang
quatrain (五言絕句) that starts with a given character. A good reply is a real poem; a bad one keeps
the shape and repeats itself. SmolLM2 is too slow for a notebook (on a busy two-core machine one
DPO step of it took 12 s and six sampled replies a minute), so we train a tiny LLaMA here, and
quote the real recipe's command and measured figures at the end. The whole notebook runs in about
half a minute.
""", """
# 8 · 从偏好与奖励中学习

第 3 课和第 6 课训练模型去模仿：回答里的每个词元都是目标。这一课换两种信号来训练。**DPO** 读的是比较：
对这个提示，回答 A 比回答 B 好。**GRPO** 读的是分数：模型写出几个回答，一个函数给每个打分，比同组兄弟
更好的回答就变得更可能出现。glassformer 按 TRL 训练器的算法计算两者，反向传播全部手写，用它们训练
LoRA 适配器。

任务和 glassformer 的对齐配方训练 SmolLM2 的一样：写一首以指定字开头的五言绝句。好的回答是一首真正的诗；
坏的回答保住了外形，却在原地打转。SmolLM2 对一个笔记本来说太慢（在一台繁忙的双核机器上，它的一步 DPO
要 12 秒，采样六个回答要一分钟），所以这里训练一个很小的 LLaMA，最后再引用真实配方的命令和实测数字。
整个笔记本大约半分钟跑完。
"""),
    setup(),
    code(r"""
import json
import tempfile
from pathlib import Path
from IPython.display import Markdown, display
from glassformer.cli import main as glassformer_cli   # the `glassformer` command, run in this kernel

WORK = Path(tempfile.mkdtemp(prefix="glassformer-course-"))
POEMS = '''床前明月光，疑是地上霜。舉頭望明月，低頭思故鄉。
春眠不覺曉，處處聞啼鳥。夜來風雨聲，花落知多少。
白日依山盡，黃河入海流。欲窮千里目，更上一層樓。
紅豆生南國，春來發幾枝。願君多采擷，此物最相思。
空山不見人，但聞人語響。返景入深林，復照青苔上。
千山鳥飛絕，萬徑人蹤滅。孤舟蓑笠翁，獨釣寒江雪。
鋤禾日當午，汗滴禾下土。誰知盤中餐，粒粒皆辛苦。
移舟泊煙渚，日暮客愁新。野曠天低樹，江清月近人。
獨坐幽篁裏，彈琴復長嘯。深林人不知，明月來相照。
松下問童子，言師採藥去。只在此山中，雲深不知處。
向晚意不適，驅車登古原。夕陽無限好，只是近黃昏。
功蓋三分國，名成八陣圖。江流石不轉，遺恨失吞吳。
山中相送罷，日暮掩柴扉。春草明年綠，王孫歸不歸。
君自故鄉來，應知故鄉事。來日綺窗前，寒梅著花未。
眾鳥高飛盡，孤雲獨去閒。相看兩不厭，只有敬亭山。
北斗七星高，哥舒夜帶刀。至今窺牧馬，不敢過臨洮。
綠蟻新醅酒，紅泥小火爐。晚來天欲雪，能飲一杯無。
打起黃鶯兒，莫教枝上啼。啼時驚妾夢，不得到遼西。'''.split()


def ask(first: str) -> str:
    return f"寫一首五言絕句，以「{first}」字開頭。"


def repetitive(poem: str, k: int) -> str:
    # the rejected reply: the poem's first clause four times (even k), or its first three
    # characters going round and round (odd k); both keep the form ，。，。
    if k % 2 == 0:
        clauses = [poem[:5]] * 4
    else:
        ring = poem[:3] * 7
        clauses = [ring[i:i + 5] for i in range(0, 20, 5)]
    return f"{clauses[0]}，{clauses[1]}。{clauses[2]}，{clauses[3]}。"


PROMPTS = [ask(poem[0]) for poem in POEMS]
PAIRS = [{"prompt": [{"role": "user", "content": prompt}],
          "chosen": [{"role": "assistant", "content": poem}],
          "rejected": [{"role": "assistant", "content": repetitive(poem, k)}]}
         for k, (prompt, poem) in enumerate(zip(PROMPTS, POEMS))]


def write_jsonl(name: str, records: list) -> Path:
    path = WORK / name
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    return path


write_jsonl("prefs.jsonl", PAIRS)
for pair in PAIRS[:2]:
    print(pair["prompt"][0]["content"], "\n  chosen:  ", pair["chosen"][0]["content"],
          "\n  rejected:", pair["rejected"][0]["content"])
REAL = find_data("tang_prefs.jsonl")
if REAL is not None:
    lines = REAL.read_text(encoding="utf-8").splitlines()
    first = json.loads(lines[0])
    print(f"\n{REAL.name}, the recipe's data: {len(lines):,} pairs; its first rejected reply:",
          first["rejected"][0]["content"])
"""),
    md("""
## The data: 18 preference pairs

Each line of a preference file is TRL's format: a prompt, a chosen reply and a rejected reply,
each a list of chat messages. Our chosen replies are eighteen well-known quatrains (李白, 王維,
孟浩然, ...). Each rejected reply is built from its poem by one of two rules of repetition, the
faults the recipe's rejected replies have too (when `../shared/data` sits beside the repository,
the cell above prints one of its pairs).
""", """
## 数据：18 个偏好对

偏好文件的每一行都是 TRL 的格式：一个提示、一个被选回答（chosen）和一个被拒回答（rejected），每个都是
聊天消息的列表。我们的 chosen 是十八首名作（李白、王维、孟浩然……）。每个 rejected 由对应的诗按两条
重复规则之一造出来，配方数据里被拒的回答也有这两种毛病（仓库旁边有 `../shared/data` 时，上一个单元格
会打印其中一对）。
"""),
    md("""
## A tokenizer and a tiny model

A byte-level BPE like SmolLM2's, with ChatML's two control tokens and template, but with merges
chosen so that every character of our poems and prompts is one token (a Chinese character is three
bytes of UTF-8, so two merges each). The model is a random LLaMA: two layers, width 64, four query
heads sharing two key/value heads. It is saved as a Hugging Face folder, which `glassformer
finetune` reads as it reads SmolLM2.
""", """
## 分词器和一个小模型

和 SmolLM2 一样是字节级 BPE，带 ChatML 的两个控制词元和聊天模板；不同的是合并规则专门挑过，让诗和提示里的
每个字都成为一个词元（一个汉字在 UTF-8 里占三个字节，所以每字两条合并）。模型是随机初始化的 LLaMA：
两层、宽度 64、四个查询头共享两个键/值头。它存成 Hugging Face 的文件夹，`glassformer finetune`
像读 SmolLM2 一样读它。
"""),
    code("""
from glassformer.models import llama
from glassformer.models.model import Model
from glassformer.tokenizers.bpe import BPETokenizer
from glassformer.tokenizers.chat_template import CHATML_TEMPLATE, chat_prompt_ids, chat_template_of
from glassformer.tokenizers.tokenizer_config import TokenizerConfig

vocab = {bytes([b]): b for b in range(256)}               # the 256 single bytes
merges = []
for char in sorted(set("".join(POEMS + PROMPTS))):
    raw = char.encode("utf-8")
    for cut in range(2, len(raw) + 1):                    # a 3-byte character: 2 merges
        if raw[:cut] not in vocab:
            merges.append((raw[:cut - 1], raw[cut - 1:cut]))
            vocab[raw[:cut]] = len(vocab)
specials = {"<|im_start|>": len(vocab), "<|im_end|>": len(vocab) + 1}
tokenizer = BPETokenizer(vocab, merges, special_tokens=specials)
tokenizer.config = TokenizerConfig(CHATML_TEMPLATE, {"eos_token": "<|im_end|>"})
print("vocabulary:", tokenizer.vocab_size, "ids; a poem is", len(tokenizer.encode(POEMS[0])), "tokens")

cfg = llama.LlamaConfig(vocab_size=tokenizer.vocab_size, max_seq_len=96, n_layer=2, n_head=4,
                        n_kv_head=2, d_model=64, d_ff=128)
glassformer.save_pretrained(Model(cfg, llama.init_params(cfg, np.random.default_rng(0)), tokenizer),
                            WORK / "base")
"""),
    md("""
## Before preferences: a model with both habits

Preferences only help a model that sometimes writes the good reply and sometimes the bad one. We
give ours both habits: 400 steps of supervised fine-tuning (notebook 6's objective, here on every
weight: `--full`) on each chosen **and** each rejected reply. It learns both by heart and samples
one or the other, about half each. (The recipe's SFT model picked up its repeating differently:
small models fall into loops when they decode greedily.) The last conversations of a file are
held out as its val split, so the poem of 「打」 is never trained on.
""", """
## 学偏好之前：一个两种习惯都有的模型

只有当模型有时写出好回答、有时写出坏回答时，偏好才帮得上忙。所以先让我们的模型两种习惯都养成：在每个
chosen **和**每个 rejected 回答上做 400 步有监督微调（第 6 课的目标函数，这里训练全部权重：`--full`）。
它把两种都背了下来，采样时一半左右写这种、一半写那种。（配方里的 SFT 模型的重复是另一种来历：小模型贪心
解码时容易陷进循环。）文件的最后几段对话留作验证集，所以「打」那首诗从没训练过。
"""),
    code(r"""
both = [{"messages": pair["prompt"] + pair[side]} for pair in PAIRS for side in ("chosen", "rejected")]
write_jsonl("both.jsonl", both)
common = ["--block-size", "80", "--eval-iters", "1", "--no-progress", "--seed", "0"]
status = glassformer_cli(["finetune", "--model", str(WORK / "base"), "--data", str(WORK / "both.jsonl"),
                          "--out", str(WORK / "sft"), "--full", "--batch-size", "8", "--max-iters", "400",
                          "--lr", "3e-3", "--warmup-iters", "10", "--lr-decay-iters", "400",
                          "--eval-interval", "400", *common])
assert status == 0
sft = glassformer.load_pretrained(WORK / "sft")
STOP = [tokenizer.special_tokens["<|im_end|>"]]
template = chat_template_of(tokenizer)
"""),
    md("""
A helper samples replies with GRPO's own sampler (`sample_groups` of
`glassformer/train/objectives/grpo.py`: each prompt repeated n times, all rows in one batch with
the KV cache, each row ending at `<|im_end|>`):
""", """
下面的辅助函数用 GRPO 自己的采样器来采样（`glassformer/train/objectives/grpo.py` 的 `sample_groups`：
每个提示重复 n 次，所有行用 KV 缓存一起生成，每行在 `<|im_end|>` 处结束）：
"""),
    code("""
from glassformer.train.objectives.grpo import sample_groups


def sample(model, prompts: list, n: int, *, temperature: float, seed: int) -> list:
    # n replies to each prompt, prompt by prompt; our prompts all have the same length in tokens
    ids = np.array([chat_prompt_ids(tokenizer, template, [{"role": "user", "content": p}])
                    for p in prompts])                                          # (B, P)
    completion, kept, _ = sample_groups(model.params, model.cfg, ids, np.ones_like(ids, bool),
                                        group=n, max_tokens=32, temperature=temperature,
                                        seed=seed, stop_ids=STOP)              # (B n, C)
    return [tokenizer.decode([int(t) for t, keep in zip(row, mask) if keep and t not in STOP])
            for row, mask in zip(completion, kept)]


for reply in sample(sft, [ask("春")], 4, temperature=0.7, seed=3):
    print(reply)
"""),
    md("""
## The DPO loss from its formula

For a prompt x with a chosen reply y_c and a rejected reply y_r, DPO asks how far the model being
trained (the policy π) has moved each reply's log-probability away from a frozen reference
π_ref, here the model above:

    r_c = β (log π(y_c | x) − log π_ref(y_c | x))        r_r = β (log π(y_r | x) − log π_ref(y_r | x))
    loss = −log σ(r_c − r_r)                              σ(z) = 1 / (1 + e^(−z)),  β = 0.1

r_c and r_r are the *implicit rewards* TRL logs as `rewards/chosen` and `rewards/rejected`;
r_c − r_r is `rewards/margins`, and `rewards/accuracies` is the share of pairs with r_c > r_r.
log π(y | x) is a sum over the reply's tokens: the reply itself, `<|im_end|>` and the newline
the template writes after it. We compute it by hand, from the logits:
""", """
## 从公式出发的 DPO 损失

对一个提示 x，被选回答 y_c，被拒回答 y_r，DPO 关心的是：正在训练的模型（策略 π）把每个回答的对数概率，
相对于一个冻结的参考模型 π_ref（这里就是上面的模型）推动了多远：

    r_c = β (log π(y_c | x) − log π_ref(y_c | x))        r_r = β (log π(y_r | x) − log π_ref(y_r | x))
    loss = −log σ(r_c − r_r)                              σ(z) = 1 / (1 + e^(−z)),  β = 0.1

r_c 和 r_r 是*隐式奖励*，TRL 把它们记作 `rewards/chosen` 与 `rewards/rejected`；r_c − r_r 是
`rewards/margins`；`rewards/accuracies` 是 r_c > r_r 的偏好对所占的比例。log π(y | x) 是回答各词元的
对数概率之和：回答本身、`<|im_end|>`，以及模板在它后面写的换行。下面从 logits 手算它：
"""),
    code("""
BETA = 0.1


def reply_logp(model, prompt: str, reply: str) -> float:
    # log pi(reply | prompt): the log-softmax of each reply token, summed
    user = [{"role": "user", "content": prompt}]
    head = chat_prompt_ids(tokenizer, template, user)                            # prompt + "assistant\\n"
    full = chat_prompt_ids(tokenizer, template, user + [{"role": "assistant", "content": reply}],
                           add_generation_prompt=False)                          # ... reply <|im_end|> \\n
    logits = model(np.array([full[:-1]]))[0].astype(np.float64)                 # (T, V)
    logp = logits - np.logaddexp.reduce(logits, axis=-1, keepdims=True)         # log-softmax
    positions = np.arange(len(head) - 1, len(full) - 1)                         # each predicts full[t + 1]
    return float(logp[positions, np.array(full)[positions + 1]].sum())


def pair_logps(model, pairs) -> np.ndarray:
    # (N, 2): log pi of each pair's chosen and rejected reply
    return np.array([[reply_logp(model, p["prompt"][0]["content"], p[side][0]["content"])
                      for side in ("chosen", "rejected")] for p in pairs])


TRAINED = PAIRS[:-1]                       # finetune holds out the last pair as its val split
ref = pair_logps(sft, TRAINED)             # (N, 2)
print("log pi_ref(chosen), log pi_ref(rejected) of the first three pairs:\\n", ref[:3])
"""),
    md("""
## Why the first step is ln 2

A LoRA adapter starts with B = 0, so at step 1 the policy *is* the reference: both log-ratios
are 0 for every pair, σ(0) = 1/2, and the loss is −log(1/2) = ln 2 = 0.693147, whatever the
pairs and whatever the model. That makes the first logged loss a check on the whole setup: it
reads 0.693147, or the reference is not the starting policy (or dropout ran in one of the two
forwards, or the log-probs were summed over the wrong tokens). `ops/dpo_loss.py` computes the
same formula; it must agree with ours:
""", """
## 为什么第一步是 ln 2

LoRA 适配器从 B = 0 开始，所以第 1 步时策略*就是*参考模型：每个偏好对的两个对数比都是 0，σ(0) = 1/2，
损失是 −log(1/2) = ln 2 = 0.693147，与数据无关，与模型无关。于是第一步记下的损失就成了对整个设置的检查：
它必须是 0.693147，否则就是参考模型不等于起点的策略（或者两次前向中有一次开了 dropout，或者对数概率
求和的词元不对）。`ops/dpo_loss.py` 算的是同一个公式，它必须和我们的一致：
"""),
    code("""
from glassformer.ops.dpo_loss import dpo_loss_backward, dpo_loss_forward


def dpo_by_hand(policy: np.ndarray, reference: np.ndarray, beta: float = BETA) -> float:
    margins = beta * ((policy[:, 0] - reference[:, 0]) - (policy[:, 1] - reference[:, 1]))
    return float(np.mean(-np.log(1.0 / (1.0 + np.exp(-margins)))))


policy = ref.copy()                                    # step 1: the policy is the reference
loss_library, ctx = dpo_loss_forward(policy[:, 0], policy[:, 1], ref[:, 0], ref[:, 1], beta=BETA)
print(f"by hand {dpo_by_hand(policy, ref):.6f}   ops/dpo_loss.py {loss_library:.6f}   ln 2 {np.log(2):.6f}")
moved = policy + np.array([1.0, -1.0])                 # chosen up 1 nat, rejected down 1 nat
print(f"after moving every pair 2 nats apart: {dpo_by_hand(moved, ref):.6f} = -log sigmoid(0.2)")
assert round(loss_library, 6) == round(dpo_by_hand(policy, ref), 6) == 0.693147
"""),
    md("""
## Its gradient

With δ = (log π(y_c) − log π_ref(y_c)) − (log π(y_r) − log π_ref(y_r)) for one pair of N, the
loss's derivative by the chosen reply's log-probability is −β σ(−β δ) / N, and the opposite for
the rejected one: every pair pushes its chosen reply up and its rejected reply down. The weight
σ(−β δ) is 1/2 at the start and fades once a pair is ranked the right way round by a wide margin,
so the pairs still ranked wrong pull hardest. Checked against finite differences, then the same
steps on a tiny model in `glassformer explain dpo`'s page, down to dL/dlogits:
""", """
## 它的梯度

对 N 个偏好对中的一个，记 δ = (log π(y_c) − log π_ref(y_c)) − (log π(y_r) − log π_ref(y_r))，损失对
chosen 对数概率的导数是 −β σ(−β δ) / N，对 rejected 的正好相反：每个偏好对都把 chosen 往上推、把
rejected 往下压。权重 σ(−β δ) 开始时是 1/2，一旦这一对以很大的间隔排对了就逐渐消失，所以还排错的偏好对
拉得最用力。先用有限差分检查，再看 `glassformer explain dpo` 的页面：同样的步骤在一个小模型上，一直算到
dL/dlogits：
"""),
    code("""
rng = np.random.default_rng(0)
pol = rng.normal(size=(4, 2)) - 20.0                   # four pairs, made-up log-probs
base = rng.normal(size=(4, 2)) - 20.0
_, grad_ctx = dpo_loss_forward(pol[:, 0], pol[:, 1], base[:, 0], base[:, 1], beta=BETA)
dchosen, drejected = dpo_loss_backward(1.0, grad_ctx)
numeric = np.zeros_like(pol)
for index in np.ndindex(pol.shape):
    up, down = pol.copy(), pol.copy()
    up[index] += 1e-6
    down[index] -= 1e-6
    numeric[index] = (dpo_by_hand(up, base) - dpo_by_hand(down, base)) / 2e-6
grad_err = float(np.abs(np.stack([dchosen, drejected], axis=1) - numeric).max())
print("d loss / d log pi(chosen):", dchosen, "\\nmax difference from finite differences:", f"{grad_err:.1e}")
assert grad_err < 1e-8
dpo_trace = glassformer.trace("dpo", grad="random")
dpo_trace.view(lang=LANG)
"""),
] + RUN_CELLS
