"""One task on one model: every item's requests scored, its answers and the task's figures.

    evaluate_task(model, spec, data_dir, limit=50)
    # -> TaskResult(name, kind, n, acc, acc_norm, baseline, centred, seconds, tokens, items)

Each item keeps its options' log-likelihoods (summed and per token), the options it picked and
whether it was right, so that a later run can be compared with it item by item (compare.py).
The few-shot examples come from the whole file; `limit` scores only its first N items.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Callable, NamedTuple

from glassformer.errors import GlassformerError
from glassformer.tasks.evaluate.batches import plan_batches
from glassformer.tasks.evaluate.encode import Encoded, encode_pair
from glassformer.tasks.evaluate.items import read_items
from glassformer.tasks.evaluate.metrics import centred, pick
from glassformer.tasks.evaluate.prompts import requests
from glassformer.tasks.evaluate.score import Scored, score_batch
from glassformer.tasks.evaluate.tasks_table import CHOICE, LM, TaskSpec


class TaskResult(NamedTuple):
    name: str
    kind: str
    n: int                       # items scored
    acc: float
    acc_norm: float | None       # multiple choice only
    baseline: float
    centred: float               # (acc - baseline) / (1 - baseline)
    seconds: float
    tokens: int                  # positions the model ran
    truncated: int               # items whose prompt lost tokens on the left
    items: list[dict]            # per item: line, logliks, token_logps, pred, pred_norm, gold


def encode_item(model, spec: TaskSpec, items, index: int, shots: int) -> list[Encoded]:
    """items[index]'s requests (one an option) as the tokens the model reads and scores."""
    return [encode_pair(model.tokenizer, context, continuation, model.context_len)
            for context, continuation in requests(spec, items, index, shots)]


def item_record(spec: TaskSpec, item, scored: Scored) -> dict:
    """One item's record: its options' log-likelihoods and the options they pick."""
    sums = [sum(logps) for logps in scored.logps]
    record = {"line": item.line, "gold": item.gold, "logliks": sums,
              "token_logps": scored.logps}
    if spec.kind == LM:
        record["pred"] = 0 if scored.greedy[0] else -1
    else:
        record["pred"] = pick(sums)
    if spec.kind == CHOICE:
        record["pred_norm"] = pick(sums, [len(option) for option in item.options])
    return record


def evaluate_task(model, spec: TaskSpec, data_dir: str | Path, *, limit: int | None = None,
                  shots: int | None = None,
                  on_item: Callable[[int, int], None] | None = None) -> TaskResult:
    """Score the first `limit` items of a task (all by default) with `shots` examples each
    (default: the task's DCLM count), several items a forward (batches.py); on_item(done,
    total) as items finish."""
    if model.tokenizer is None:
        raise GlassformerError("this model has no tokenizer: evaluation needs the text encoded")
    items = read_items(Path(data_dir) / spec.file, spec.kind)
    shots = spec.shots if shots is None else shots
    total = len(items) if limit is None else min(limit, len(items))
    start, tokens, records = time.perf_counter(), 0, [None] * total
    encoded = [encode_item(model, spec, items, index, shots) for index in range(total)]
    for batch in plan_batches(encoded):
        for index, scored in zip(batch, score_batch(model, [encoded[i] for i in batch])):
            records[index] = item_record(spec, items[index], scored)
            tokens += scored.tokens
        if on_item is not None:
            on_item(sum(record is not None for record in records), total)
    truncated = sum(any(e.truncated for e in group) for group in encoded)
    acc = sum(r["pred"] == r["gold"] for r in records) / total
    acc_norm = (sum(r["pred_norm"] == r["gold"] for r in records) / total
                if spec.kind == CHOICE else None)
    return TaskResult(spec.name, spec.kind, total, acc, acc_norm, spec.baseline,
                      centred(acc, spec.baseline),
                      time.perf_counter() - start, tokens, truncated, records)
