"""The page of one constrained generation (static/constrained.js draws it): per generated token,
how many tokens the schema's mask allowed, and the model's top choices with those the mask
removed struck through.

    prompt ids + reply ids --one forward--> the logits before each reply token (B=1, T, V)
    table (the schema's MaskTable) walked along the reply --> each step's allowed ids

The reply is written first (generate(), KV cache, the mask applied before sampling); the page
then re-scores it in one forward, as a teacher-forced pass: the same logits up to float32
rounding, all at once. Probabilities are the model's own (softmax at temperature 1, before the
mask): a struck-through candidate is one the model liked and the grammar refused.

`constrained_data(model, prompt_ids, reply_ids, table, ...)` returns a JSON-ready dict:

    kind "constrained", model, schema (its text), prompt, reply (texts), vocab (V), top (K)
    steps  [{id, text, allowed, p, q, top: [{id, text, p, allowed}]}]
           per reply token: its id and text (Token.text: characters, or ⟨E6 B0⟩ bytes), how
           many of the V tokens the mask allowed, its probability before (p) and after (q) the
           mask, and the model's K likeliest tokens, each marked allowed or not
"""
from __future__ import annotations

import json

import numpy as np

from glassformer.errors import GlassformerError
from glassformer.generate.constrain import RowConstraint, advance_rows
from glassformer.generate.generate import generate
from glassformer.ops.softmax import softmax_forward
from glassformer.viewer.tokens import describe_tokens

SCRIPTS = ["common.js", "constrained.js"]
TOP = 8          # candidates shown per step
DIGITS = 6       # decimals kept for the probabilities written as JSON


def constrained_reply(model, prompt_ids: list[int], table, **generate_kwargs) -> list[int]:
    """The ids generate() writes for one prompt under the table's mask, its end-of-text id
    included when the value ended before max_new_tokens (the page shows that step too)."""
    if not prompt_ids:
        raise GlassformerError("the prompt is empty: give at least one character")
    stop = sorted(int(i) for i in table.eos_ids)
    reply = []
    for step in generate(model, np.array([prompt_ids], dtype=np.int64), stop=stop,
                         constraint=table, **generate_kwargs):
        reply.append(int(step[0]))
        if reply[-1] in stop:
            break
    return reply


def reply_logits(model, prompt_ids: list[int], reply_ids: list[int]) -> np.ndarray:
    """(N, V) float32: the logits each of the N reply tokens was chosen from."""
    ids = np.array([list(prompt_ids) + list(reply_ids[:-1])], dtype=np.int64)   # (1, T)
    if ids.shape[1] > model.context_len:
        raise GlassformerError(f"the prompt and reply are {ids.shape[1]} tokens, past the "
                               f"model's context of {model.context_len}: ask for fewer new "
                               "tokens (--max-new-tokens) for the page")
    logits, _ = model.forward(ids)                                      # (1, T, V)
    return logits[0, len(prompt_ids) - 1:]                              # (N, V)


def constrained_steps(model, prompt_ids: list[int], reply_ids: list[int], table,
                      top: int = TOP) -> list[dict]:
    """Each reply token's step (module docstring), the table walked from its start."""
    if not reply_ids:
        return []
    logits = reply_logits(model, prompt_ids, reply_ids)                # (N, V)
    vocab = logits.shape[1]
    probs, _ = softmax_forward(logits.astype(np.float64))              # (N, V)
    order = np.argsort(-probs, axis=-1, kind="stable")[:, :top]        # (N, K)
    row = RowConstraint.start(table)
    steps = []
    for i, token in enumerate(reply_ids):
        allowed = table.allowed(row.state)[:vocab]                     # (V,) bool
        kept = probs[i] * allowed
        chosen = describe_tokens(model.tokenizer, [token])[0]
        shown = describe_tokens(model.tokenizer, order[i].tolist())
        steps.append({
            "id": int(token), "text": chosen.text, "allowed": int(allowed.sum()),
            "p": round(float(probs[i, token]), DIGITS),
            "q": round(float(kept[token] / max(kept.sum(), 1e-300)), DIGITS),
            "top": [{"id": tok.id, "text": tok.text, "p": round(float(probs[i, tok.id]), DIGITS),
                     "allowed": bool(allowed[tok.id])} for tok in shown]})
        if not allowed[token]:
            raise GlassformerError(f"reply token {token} at step {i} is outside the grammar")
        advance_rows([row], np.array([token]))          # an end-of-text id leaves the state
    return steps


def constrained_data(model, prompt_ids: list[int], reply_ids: list[int], table, *,
                     name: str, schema: dict | None, top: int = TOP) -> dict:
    """Everything the page shows (module docstring). schema None: any JSON object."""
    tokenizer = model.tokenizer
    body = [t for t in reply_ids if t not in set(table.eos_ids.tolist())]
    return {"kind": "constrained", "model": name,
            "schema": json.dumps(schema, indent=2, ensure_ascii=False) if schema is not None
            else '{"type": "object"}  (json_object: any JSON object)',
            "prompt": tokenizer.decode(list(prompt_ids)), "reply": tokenizer.decode(body),
            "vocab": int(table.vocab), "top": top,
            "steps": constrained_steps(model, prompt_ids, reply_ids, table, top)}
