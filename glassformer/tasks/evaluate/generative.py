"""A generative task on a chat model (GSM8K, ChatCORE's shape): replies written greedily, their
final numbers checked against the answers.

    1. each problem's conversation (gsm8k.py) rendered with the model's chat template, as ids
    2. the ids every row of a batch shares (the system prompt and the 8 shots) run once into a
       one-row KV cache (kept for the next batches while they share it too)          (1, P)
    3. that cache repeated to one row per problem, each problem's own rest left-padded after
       it, and generate() writes every row greedily until the end of its turn        (B, R + new)
    4. a row is done at an end-of-turn token (<|im_end|>), once its reply holds a whole
       "#### N" line, or after max_new_tokens; the batch ends when every row is done
    5. the final number of each reply against the answer: accuracy and its standard error

Greedy decoding (temperature 0) makes a run repeatable; batching rows changes no reply (each row
reads only its own tokens, generate/generate.py), only how many steps the batch shares.
"""
from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Callable, NamedTuple

import numpy as np

from glassformer.blocks.kv_cache import KVCache
from glassformer.errors import GlassformerError
from glassformer.generate.generate import generate
from glassformer.tasks.chat import common_prefix
from glassformer.tasks.evaluate.gsm8k import final_number, is_right, messages, read_problems
from glassformer.tasks.evaluate.run_task import TaskResult
from glassformer.tasks.evaluate.tasks_table import TaskSpec
from glassformer.tokenizers.chat_template import chat_prompt_ids, chat_template_of
from glassformer.tokenizers.end_of_text import end_of_text_ids

MAX_NEW_TOKENS = 256   # GSM8K's worked solutions are under 200 tokens
ROWS = 8               # problems written side by side
DONE = re.compile(r"####\s*\$?\s*-?[\d,]*\.?\d+\s*\n")   # a whole "#### N" line


class Prefix(NamedTuple):
    ids: list[int]      # the tokens the cache holds
    cache: KVCache      # one row, exactly len(ids) positions


def prompt_ids(model, template, conversation: list[dict]) -> list[int]:
    """The ids the model reads: the conversation in its chat template, the assistant's turn
    opened."""
    return chat_prompt_ids(model.tokenizer, template, conversation, add_generation_prompt=True)


def shared_prefix(model, rows: list[list[int]], held: Prefix | None) -> Prefix:
    """`held` when every row starts with its ids, else a fresh one-row cache of what the rows
    share (at most each row's length minus one: every row feeds at least one token)."""
    if held is not None and all(row[:len(held.ids)] == held.ids for row in rows) and \
            all(len(row) > len(held.ids) for row in rows):
        return held
    length = min(min(common_prefix(rows[0], row) for row in rows), min(map(len, rows)) - 1)
    cache = model.new_cache(1, max_len=max(length, 1))
    if length:
        model.forward(np.asarray(rows[0][:length])[None, :], kv_cache=cache, last_only=True)
        cache.advance(length)
    return Prefix(rows[0][:length], cache)


def write_replies(model, rows: list[list[int]], prefix: Prefix,
                  max_new_tokens: int) -> tuple[list[str], int]:
    """Greedy replies to every row, the prefix from its cache; and the positions run."""
    tokenizer, start = model.tokenizer, len(prefix.ids)
    rest = max(len(row) for row in rows) - start
    ids = np.zeros((len(rows), start + rest), np.int64)              # (B, P + R)
    mask = np.zeros(ids.shape, bool)
    ids[:, :start], mask[:, :start] = prefix.ids, True
    for b, row in enumerate(rows):                 # each row's rest, left-padded after the prefix
        ids[b, start + rest - (len(row) - start):] = row[start:]
        mask[b, start + rest - (len(row) - start):] = True
    cache = prefix.cache.select_rows(np.zeros(len(rows), np.int64))
    cache = cache.with_room(start + rest + max_new_tokens)
    stop = end_of_text_ids(tokenizer)
    written = [[] for _ in rows]
    done = np.zeros(len(rows), bool)
    steps = 0
    for tokens in generate(model, ids, max_new_tokens=max_new_tokens, temperature=0.0,
                           stop=stop, attention_mask=mask, kv_cache=cache):
        steps += 1
        for b, token in enumerate(tokens):
            if done[b]:
                continue
            if int(token) in stop:
                done[b] = True
                continue
            written[b].append(int(token))
            done[b] = DONE.search(tokenizer.decode(written[b][-24:])) is not None
        if done.all():
            break
    ran = sum(len(row) - start for row in rows) + steps * len(rows)
    return [tokenizer.decode(tokens) for tokens in written], ran


def evaluate_generative(model, spec: TaskSpec, data_dir: str | Path, *, limit: int | None = None,
                        shots: int | None = None, max_new_tokens: int = MAX_NEW_TOKENS,
                        rows: int = ROWS,
                        on_item: Callable[[int, int], None] | None = None) -> TaskResult:
    """The first `limit` problems of a GSM8K file answered greedily in the chat format with
    `shots` worked examples (default 8): exact-match accuracy, every reply kept."""
    if model.tokenizer is None:
        raise GlassformerError("this model has no tokenizer: evaluation needs the text encoded")
    try:
        template = chat_template_of(model.tokenizer)
    except GlassformerError:
        raise GlassformerError(f"{spec.name} is scored in the chat format, and this model has "
                               "no chat template (use an instruct model, e.g. smollm2)") from None
    problems = read_problems(Path(data_dir) / spec.file)
    shots = spec.shots if shots is None else shots
    total = len(problems) if limit is None else min(limit, len(problems))
    start, tokens, records, held = time.perf_counter(), 0, [], None
    for first in range(0, total, rows):
        batch = range(first, min(first + rows, total))
        ids = [prompt_ids(model, template, messages(problems, i, shots)) for i in batch]
        longest = max(map(len, ids)) + max_new_tokens
        if longest > model.context_len:
            raise GlassformerError(f"{spec.name}: a prompt of {longest - max_new_tokens} tokens "
                                   f"+ {max_new_tokens} new tokens is past the model's context "
                                   f"of {model.context_len}: use fewer --shots")
        prefix = shared_prefix(model, ids, held)
        if held is None:
            held, tokens = prefix, tokens + len(prefix.ids)
        elif prefix is not held:
            tokens += len(prefix.ids)
        replies, ran = write_replies(model, ids, prefix, max_new_tokens)
        tokens += ran
        for i, reply in zip(batch, replies):
            number = final_number(reply)
            records.append({"line": problems[i].line, "gold": problems[i].answer,
                            "pred": number, "correct": is_right(number, problems[i].answer),
                            "reply": reply})
        if on_item is not None:
            on_item(len(records), total)
    acc = sum(record["correct"] for record in records) / total
    return TaskResult(spec.name, spec.kind, total, acc, None, spec.baseline, acc,
                      time.perf_counter() - start, tokens, 0, records)
