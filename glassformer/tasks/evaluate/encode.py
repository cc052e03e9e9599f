"""A request's tokens as lm-evaluation-harness's `hf` backend makes them, and its truncation.

    context ends in spaces      they move to the continuation ("Answer: " + "Paris" is scored
                                as "Answer:" + " Paris", the way BPE tokenizers split words)
    whole      = encode(context + continuation)
    context    = encode(context)
    continuation tokens = whole[len(context):]

(lm-eval's `_encode_pair`.) No BOS is added: glassformer's tokenizers add none and lm-eval's `hf`
model adds none by default (add_bos_token=False), which is how SmolLM2 (GPT-2 style BPE) is
scored.

The model reads the sequence context + continuation minus its last token and predicts the tokens
after the context. A sequence longer than the model's context plus one keeps its last tokens
(`(context + continuation)[-(T + 1):]`, lm-eval's truncation from the left).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np


class Encoded(NamedTuple):
    inputs: np.ndarray    # (L,) int64, the tokens the model reads (L <= its context)
    targets: np.ndarray   # (n,) the continuation's tokens, predicted by the last n inputs
    truncated: bool       # the sequence lost tokens on the left


def encode_pair(tokenizer, context: str, continuation: str, context_len: int) -> Encoded:
    """One (context, continuation) request as the tokens the model reads and the ones it scores."""
    spaces = len(context) - len(context.rstrip())
    if spaces:
        context, continuation = context[:-spaces], context[-spaces:] + continuation
    whole = tokenizer.encode(context + continuation)
    head = tokenizer.encode(context)
    return encoded(head + whole[len(head):], whole[len(head):], context_len)


def encoded(sequence: list[int], targets: list[int], context_len: int) -> Encoded:
    """A request's whole sequence (context + continuation tokens) and its continuation's tokens,
    cut from the left to the model's context plus one."""
    truncated = len(sequence) > context_len + 1
    sequence = sequence[-(context_len + 1):]
    return Encoded(np.asarray(sequence[:-1], np.int64),
                   np.asarray(targets[-context_len:], np.int64), truncated)
