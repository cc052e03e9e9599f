"""Streaming text: turn token ids into printable text as they arrive, one token at a time.

A byte-level BPE token is a run of bytes, not of characters: an emoji or a Chinese character
(3-4 UTF-8 bytes) may be split across two or three tokens, and decoding those tokens one by one
would print U+FFFD garbage. So we decode a small window and print only text that is complete:

    ids:      ... [prefix ...... read) [new ids]
    old_text = decode(ids[prefix:read])          what was already printed from this window
    new_text = decode(ids[prefix:])              the window plus the new ids
    print new_text[len(old_text):] only when it is longer and does not end in U+FFFD
    (a character still cut in half); then slide the window: prefix = read, read = len(ids)

The window restarts at the last printed boundary, so each step decodes a few tokens, not the
whole text (the same scheme as Hugging Face's text-generation-inference). Only the Tokenizer
interface's `decode` is used, so it works for every tokenizer, char-level included.
"""
from __future__ import annotations

from typing import Iterable, Iterator, NamedTuple

import numpy as np

from glassformer.errors import GlassformerError
from glassformer.generate.generate import generate
from glassformer.tokenizers.end_of_text import end_of_text_ids

REPLACEMENT = "\ufffd"   # what decode puts in place of bytes that are not (yet) valid UTF-8


class StreamStep(NamedTuple):
    """One generated token and the text it completed ('' while a character is still cut)."""
    token_id: int | None   # None for the final flush, which carries leftover text only
    text: str


def stream_text(tokenizer, token_ids: Iterable[int]) -> Iterator[StreamStep]:
    """Yield a StreamStep per id; concatenating their text gives tokenizer.decode(all ids).

    At the end (the stop, or a --max-new-tokens cut) the text still held back is flushed with
    token_id None, less a character cut in half at the very end: its bytes never completed, and
    a trailing U+FFFD would only be noise (issue 32). So the texts join to tokenizer.decode(all
    ids) without a trailing U+FFFD.
    """
    ids: list[int] = []
    prefix = read = 0
    for token_id in token_ids:
        ids.append(int(token_id))
        old_text = tokenizer.decode(ids[prefix:read])
        new_text = tokenizer.decode(ids[prefix:])
        if len(new_text) > len(old_text) and not new_text.endswith(REPLACEMENT):
            yield StreamStep(int(token_id), new_text[len(old_text):])
            prefix, read = read, len(ids)
        else:
            yield StreamStep(int(token_id), "")
    if read < len(ids):
        old_text = tokenizer.decode(ids[prefix:read])
        yield StreamStep(None, tokenizer.decode(ids[prefix:])[len(old_text):].rstrip(REPLACEMENT))


def generated_ids(model, prompt_ids: list[int], *, stop_ids: Iterable[int] = (),
                  **generate_kwargs) -> Iterator[int]:
    """Token ids of one prompt as `generate(model, ...)` chooses them, ending before a stop id.

    generate_kwargs: max_new_tokens, temperature, top_k, top_p (or sampling), seed, use_cache.
    """
    stop = sorted({int(i) for i in stop_ids})
    for step in generate(model, np.asarray([prompt_ids], dtype=np.int64), stop=stop,
                         **generate_kwargs):
        token_id = int(step[0])
        if token_id in stop:
            return
        yield token_id


def stream_generate(model, prompt: str, *, stop_ids: Iterable[int] | None = None,
                    **generate_kwargs) -> Iterator[StreamStep]:
    """Encode `prompt` with the model's tokenizer, generate, and stream the new text.

    stop_ids: ids that end generation (not printed); default: the tokenizer's end-of-text
    specials (tokenizers/end_of_text.py).
    """
    tokenizer = model.tokenizer
    if tokenizer is None:
        raise GlassformerError("this model has no tokenizer, so text cannot be generated; "
                               "load it from a folder or file that includes one")
    prompt_ids = tokenizer.encode(prompt)
    if not prompt_ids:
        raise GlassformerError("the prompt is empty: give at least one character")
    stop = end_of_text_ids(tokenizer) if stop_ids is None else stop_ids
    ids = generated_ids(model, prompt_ids, stop_ids=stop, **generate_kwargs)
    return stream_text(tokenizer, ids)
