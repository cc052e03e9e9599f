"""Loss and perplexity of a causal LM on a whole text file.

The text is encoded once and cut into consecutive windows of T + 1 tokens (T = the model's
context, or --block-size); each window predicts its last T tokens from the ones before. Every
token except the first of each window is scored once, and

    loss = mean over scored tokens of -log p(token | previous tokens in its window)
    perplexity = exp(loss)

Non-overlapping windows are the standard, cheap estimate (a sliding window would give each token
more context and a slightly lower loss).
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from glassformer.errors import GlassformerError
from glassformer.ops.cross_entropy import cross_entropy_forward


class EvalResult(NamedTuple):
    loss: float          # mean cross-entropy, nats per token
    perplexity: float    # exp(loss)
    tokens: int          # tokens scored


def evaluate_ids(model, ids: np.ndarray, *, block_size: int | None = None,
                 batch_size: int = 8) -> EvalResult:
    """Mean next-token loss of `model` over `ids` (1-D), in windows of block_size + 1."""
    t = block_size or model.context_len
    if t > model.context_len:
        raise GlassformerError(f"block size {t} is longer than the model's context "
                               f"max_seq_len={model.context_len}")
    ids = np.asarray(ids, dtype=np.int64)
    n_windows = (len(ids) - 1) // t
    if n_windows < 1:
        raise GlassformerError(f"the text has {len(ids)} tokens; at least {t + 1} are needed "
                               f"for one window of block size {t}")
    windows = ids[:n_windows * t + 1]
    inputs = windows[:-1].reshape(n_windows, t)                 # (N, T)
    targets = windows[1:].reshape(n_windows, t)                 # (N, T), shifted by one
    total = 0.0
    for start in range(0, n_windows, batch_size):
        x, y = inputs[start:start + batch_size], targets[start:start + batch_size]
        logits, _ = model.forward(x)                            # (b, T, V)
        loss, _ = cross_entropy_forward(logits, y)
        total += float(loss) * y.size
    mean = total / targets.size
    return EvalResult(loss=mean, perplexity=math.exp(mean), tokens=int(targets.size))


def evaluate_text(model, text: str, **kwargs) -> EvalResult:
    """Encode `text` with the model's tokenizer, then `evaluate_ids`."""
    if model.tokenizer is None:
        raise GlassformerError("this model has no tokenizer, so it cannot read text")
    return evaluate_ids(model, np.array(model.tokenizer.encode(text)), **kwargs)
