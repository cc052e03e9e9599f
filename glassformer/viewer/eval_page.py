"""The page of one benchmark item (static/eval.js draws it): each option's tokens and how likely
the model found each one.

`eval_item_data(model, spec, items, index, shots, name)` scores items[index] as
`glassformer eval` does (tasks/evaluate/: the same prompt, tokens and scorer) and returns a
JSON-ready dict:

    kind "eval_item", model, task, task_kind, line (of the task file), shots, baseline
    prompt            the shared text before the options (schema: the text before the first
                      option's context; the options then hold each context)
    gold, pred, pred_norm    the right option, acc's pick, acc_norm's pick (null but for
                             multiple choice)
    options  [{text, context, tokens: [{id, text, logp, prob}], sum, chars, per_char,
               greedy}]       per option: the continuation's tokens (Token.text: characters,
                              or ⟨E6 B0⟩ bytes), each one's log-probability and probability,
                              their sum, the option's length in characters and sum / length
"""
from __future__ import annotations

import math

from glassformer.tasks.evaluate.encode import encode_pair
from glassformer.tasks.evaluate.metrics import pick
from glassformer.tasks.evaluate.prompts import requests
from glassformer.tasks.evaluate.score import score_requests
from glassformer.tasks.evaluate.tasks_table import CHOICE, LM, TaskSpec
from glassformer.viewer.tokens import describe_tokens

DIGITS = 6   # decimals kept for the log-probabilities written as JSON
SCRIPTS = ["common.js", "eval.js"]


def _common_start(texts: list[str]) -> int:
    """How many leading characters every text shares."""
    length = min(map(len, texts))
    for i in range(length):
        if any(text[i] != texts[0][i] for text in texts):
            return i
    return length


def eval_item_data(model, spec: TaskSpec, items, index: int, shots: int, *, name: str) -> dict:
    """Everything the item page shows (module docstring)."""
    pairs = requests(spec, items, index, shots)
    encoded = [encode_pair(model.tokenizer, context, continuation, model.context_len)
               for context, continuation in pairs]
    scored = score_requests(model, encoded)
    item = items[index]
    start = _common_start([context for context, _ in pairs])
    options = []
    for option, (context, _), request, logps, greedy in zip(item.options, pairs, encoded,
                                                            scored.logps, scored.greedy):
        tokens = describe_tokens(model.tokenizer, [int(t) for t in request.targets])
        total = sum(logps)
        options.append({
            "text": option, "context": context[start:],
            "tokens": [{"id": tok.id, "text": tok.text, "logp": round(lp, DIGITS),
                        "prob": round(math.exp(lp), DIGITS)} for tok, lp in zip(tokens, logps)],
            "sum": round(total, DIGITS), "chars": len(option),
            "per_char": round(total / max(len(option), 1), DIGITS), "greedy": greedy})
    sums = [sum(logps) for logps in scored.logps]
    pred = (0 if scored.greedy[0] else -1) if spec.kind == LM else pick(sums)
    pred_norm = (pick(sums, [len(option) for option in item.options])
                 if spec.kind == CHOICE else None)
    return {"kind": "eval_item", "model": name, "task": spec.name, "task_kind": spec.kind,
            "line": item.line, "shots": shots, "baseline": spec.baseline,
            "prompt": pairs[0][0][:start], "gold": item.gold, "pred": pred,
            "pred_norm": pred_norm, "options": options}
