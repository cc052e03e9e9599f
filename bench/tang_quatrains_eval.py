"""The Tang recipe's judge: how many replies to held-out prompts are well-formed quatrains.

Each prompt of ../shared/data/tang_sft_heldout.jsonl (never trained on) asks for a five- or
seven-character quatrain (五言 / 七言絕句) starting with a given character. A reply is
well-formed when it is exactly four clauses of that many Chinese characters, the first and third
ending in ，and the second and fourth in 。:

    四時運灰琯，一夕變冬春。送寒餘雪盡，迎歲早梅新。        5 + ， + 5 + 。 + 5 + ， + 5 + 。

(whitespace around the reply is ignored; nothing else may be in it). The share that also start with
the asked character is reported beside it. Replies are greedy (temperature 0), in batches of
left-padded prompts, each prompt rendered with the model's chat template as `glassformer chat`
renders it. The held-out loss is the fine-tuning loss (assistant tokens only,
train/datasets/chat.py) on the same conversations.

    python -m bench.tang_quatrains_eval --model smollm2                       # before
    python -m bench.tang_quatrains_eval --model smollm2 --adapter RUN          # after (LoRA)
    python -m bench.tang_quatrains_eval --model RUN                            # after (--full)

Last line: one JSON object with well_formed, well_formed_and_first_char, heldout_loss, n,
seconds, and a few sampled replies.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

import numpy as np

from glassformer.cli.common import blas_sized_to_free_cores
from glassformer.generate.generate import generate
from glassformer.io.pretrained import load_pretrained
from glassformer.ops.cross_entropy import cross_entropy_forward
from glassformer.packaged import MODEL, resolve_path
from glassformer.tokenizers.chat_template import chat_prompt_ids, chat_template_of
from glassformer.tokenizers.end_of_text import end_of_text_ids
from glassformer.train.datasets.chat import encode_conversation, pad_rows

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_HELDOUT = ROOT.parent / "shared" / "data" / "tang_sft_heldout.jsonl"
# one Chinese character: CJK unified ideographs (extension A, the main block, compatibility
# ideographs, extensions B and later)
HAN = r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0003134f]"
IM_END = "<|im_end|>"


def asked_form(prompt: str) -> tuple[int, str | None]:
    """(characters per clause, the asked first character) from a held-out prompt."""
    length = 5 if "五言" in prompt else 7 if "七言" in prompt else 0
    first = re.search(r"「(.)」", prompt)
    return length, (first.group(1) if first else None)


def is_quatrain(reply: str, length: int) -> bool:
    """Four clauses of exactly `length` Chinese characters, ending ，。，。 (see the docstring)."""
    clause = f"{HAN}{{{length}}}"
    pattern = f"{clause}，{clause}。{clause}，{clause}。"
    return re.fullmatch(pattern, reply.strip()) is not None


def load_conversations(path: Path, n: int) -> list[list[dict]]:
    """The first n conversations of a chat JSONL file."""
    with open(path, encoding="utf-8") as f:
        lines = [line for line in f if line.strip()][:n]
    return [json.loads(line)["messages"] for line in lines]


def load(model_path: str, adapter: str | None):
    """The model to judge: a named or path model, with a LoRA adapter folder when given."""
    path = resolve_path(model_path, MODEL)
    if adapter is None:
        return load_pretrained(path)
    return load_pretrained(path, adapter=adapter)


def replies(model, conversations: list[list[dict]], *, batch: int, max_new_tokens: int,
            temperature: float = 0.0, seed: int = 0) -> list[str]:
    """Greedy replies to each conversation's first user message, `batch` prompts at a time
    (temperature > 0: sampled, batch b with seed + b; bench/align_judge.py)."""
    tokenizer = model.tokenizer
    template = chat_template_of(tokenizer)
    stop = sorted(set(end_of_text_ids(tokenizer)) | {tokenizer.special_tokens[IM_END]})
    prompts = [chat_prompt_ids(tokenizer, template, messages[:1]) for messages in conversations]
    texts = []
    for start in range(0, len(prompts), batch):
        group = prompts[start:start + batch]
        width = max(len(ids) for ids in group)
        ids = np.zeros((len(group), width), dtype=np.int64)            # (B, T0), left-padded
        mask = np.zeros((len(group), width), dtype=bool)
        for row, prompt in enumerate(group):
            ids[row, width - len(prompt):] = prompt
            mask[row, width - len(prompt):] = True
        cache = model.new_cache(len(group), width + max_new_tokens)
        steps = list(generate(model, ids, max_new_tokens=max_new_tokens,
                              temperature=temperature, seed=seed + start, stop=stop,
                              attention_mask=mask, kv_cache=cache))
        new = np.stack(steps, axis=1) if steps else np.zeros((len(group), 0), np.int64)
        for row in new:
            kept = []
            for token in row.tolist():
                if token in stop:
                    break
                kept.append(token)
            texts.append(tokenizer.decode(kept))
        print(f"  {start + len(group)}/{len(prompts)} replies", file=sys.stderr, flush=True)
    return texts


def heldout_loss(model, conversations: list[list[dict]], *, batch: int) -> float:
    """Mean cross-entropy of the assistant tokens (the sft objective's loss), over all
    conversations."""
    tokenizer = model.tokenizer
    template = chat_template_of(tokenizer)
    encoded = [encode_conversation(tokenizer, template, messages) for messages in conversations]
    data = pad_rows([ids for ids, _ in encoded], [mask for _, mask in encoded])
    total, count = 0.0, 0
    for start in range(0, len(encoded), batch):
        rows = slice(start, start + batch)
        width = int(data.lengths[rows].max()) - 1
        x, y = data.ids[rows, :width], data.targets[rows, :width].astype(np.int64)
        logits, _ = model.forward(x.astype(np.int64))                  # (B, T, V)
        loss, _ = cross_entropy_forward(logits, y)
        n = int(np.count_nonzero(y != -100))
        total, count = total + float(loss) * n, count + n
    return total / count


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2", help="model to judge (name or path)")
    parser.add_argument("--adapter", default=None, help="LoRA adapter folder (a finetune run)")
    parser.add_argument("--heldout", default=str(DEFAULT_HELDOUT), help="held-out chat JSONL")
    parser.add_argument("--n", type=int, default=100, help="prompts judged (the file's first n)")
    parser.add_argument("--batch", type=int, default=20, help="prompts generated together")
    parser.add_argument("--max-new-tokens", type=int, default=96,
                        help="reply length cap (a 7-character quatrain is ~75 SmolLM2 tokens)")
    parser.add_argument("--samples", type=int, default=6, help="replies shown in the JSON")
    args = parser.parse_args(argv)
    # as the CLI does: BLAS threads = the cores free now (on a busy machine, two threads wait on
    # each other in the small matrix products of decoding)
    with blas_sized_to_free_cores():
        return judge(args)


def judge(args) -> int:
    start = time.perf_counter()
    model = load(args.model, args.adapter)
    conversations = load_conversations(Path(args.heldout), args.n)
    texts = replies(model, conversations, batch=args.batch, max_new_tokens=args.max_new_tokens)
    good = good_first = 0
    examples = []
    for messages, text in zip(conversations, texts):
        length, first = asked_form(messages[0]["content"])
        ok = is_quatrain(text, length)
        good += ok
        good_first += ok and text.strip().startswith(first or "")
        if len(examples) < args.samples:
            examples.append({"prompt": messages[0]["content"], "reply": text, "well_formed": ok})
        print(f"{'OK ' if ok else '-- '} {messages[0]['content']}  {text!r}", file=sys.stderr)
    loss = heldout_loss(model, conversations, batch=args.batch)
    result = {"model": args.model, "adapter": args.adapter, "n": len(texts),
              "well_formed": good / len(texts), "well_formed_and_first_char": good_first / len(texts),
              "heldout_loss": round(loss, 4), "seconds": round(time.perf_counter() - start, 1),
              "examples": examples}
    print(json.dumps(result, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
