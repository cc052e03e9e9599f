"""What `glassformer patch`, `attribute` and `heads` share: --max-cache-mb, and a prompt or an
answer as token ids through the model's own tokenizer."""
from __future__ import annotations

import numpy as np

from glassformer.errors import GlassformerError


def add_cache_argument(parser) -> None:
    parser.add_argument("--max-cache-mb", type=float, default=None,
                        help="refuse, before running, when the cached activations would take "
                             "more than this many MiB (default: half this machine's memory)")


def tokens_of(model, text: str) -> np.ndarray:
    """text -> (T,) int64 ids by the model's tokenizer; one line when it has none or T is 0."""
    if model.tokenizer is None:
        raise GlassformerError("this model came without a tokenizer; give a model folder or "
                               "file that has one")
    ids = np.asarray(model.tokenizer.encode(text), dtype=np.int64)
    if ids.size == 0:
        raise GlassformerError(f"the prompt {text!r} encodes to no tokens")
    return ids


def one_token(model, text: str, flag: str) -> int:
    """The single token id `text` encodes to; more than one token is one line naming them."""
    ids = tokens_of(model, text)
    if ids.size != 1:
        pieces = [model.tokenizer.decode([int(i)]) for i in ids]
        raise GlassformerError(f"{flag} {text!r} is {ids.size} tokens {pieces}; give one token "
                               "(often with its leading space, ' Paris')")
    return int(ids[0])
