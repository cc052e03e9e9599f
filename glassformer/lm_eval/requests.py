"""lm-eval's three request types as the tokens glassformer scores, without lm-eval itself.

    loglikelihood(context, continuation)   encode_pair (tasks/evaluate/encode.py): the pair
                                           tokenized as lm-eval's hf backend does; an empty
                                           context reads the prefix token (end of text) first
    loglikelihood_rolling(text)            the text's tokens in windows of the model's context,
                                           the first after the prefix token, each later one
                                           predicting new tokens only (lm-eval's
                                           get_rolling_token_windows + make_disjoint_window,
                                           context_len=1: the hf backend's perplexity)
    generate_until(context, until)         the greedy text cut before the first stop string

Pure functions over token lists, so the LM class (model.py) only groups and batches them.
"""
from __future__ import annotations

import numpy as np

from glassformer.errors import GlassformerError
from glassformer.tasks.evaluate.encode import Encoded, encode_pair, encoded
from glassformer.tokenizers.end_of_text import end_of_text_ids


def prefix_token(tokenizer) -> int:
    """The token read before a text that has no context (lm-eval's prefix_token_id: end of
    text); a char tokenizer has none, so such a request cannot be scored."""
    ids = end_of_text_ids(tokenizer)
    if not ids:
        raise GlassformerError("this tokenizer has no end-of-text token, so a request with an "
                               "empty context (or a rolling log-likelihood) has nothing to read "
                               "before its first token")
    return ids[0]


def encode_request(tokenizer, context: str, continuation: str, context_len: int) -> Encoded:
    """One loglikelihood request's tokens; an empty context reads the prefix token."""
    if context:
        return encode_pair(tokenizer, context, continuation, context_len)
    targets = tokenizer.encode(continuation)
    return encoded([prefix_token(tokenizer)] + targets, targets, context_len)


def rolling_windows(tokens: list[int], prefix: int, context_len: int) -> list[Encoded]:
    """Windows of at most `context_len` inputs whose targets cover every token once.

    >>> [(w.inputs.tolist(), w.targets.tolist()) for w in rolling_windows([5, 6, 7, 8, 9], 0, 3)]
    [([0, 5, 6], [5, 6, 7]), ([6, 7, 8], [8, 9])]
    """
    windows, done = [], 0
    while done < len(tokens):
        if done == 0:
            count = min(context_len, len(tokens))
            inputs = [prefix] + tokens[:count - 1]
        else:
            count = min(len(tokens) - done, context_len)   # new tokens this window predicts
            end = done + count
            inputs = tokens[max(end - context_len - 1, 0):end - 1]
        windows.append(Encoded(np.asarray(inputs, np.int64),
                               np.asarray(tokens[done:done + count], np.int64), False))
        done += count
    return windows


def cut_at_stop(text: str, until: list[str]) -> tuple[str, bool]:
    """The text before the first stop string, and whether one was found.

    >>> cut_at_stop("a cat.\\nNext", ["\\n", "."])
    ('a cat', True)
    """
    found = [text.index(stop) for stop in until if stop and stop in text]
    return (text[:min(found)], True) if found else (text, False)
