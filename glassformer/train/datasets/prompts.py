"""Prompts for GRPO: TRL's prompt-only formats in, prompt ids and the records the rewards see out.

One JSON object a line, either

    {"prompt": [{"role": "user", "content": "..."}], ...}     conversational (TRL's)
    {"prompt": "...", ...}                                    plain text
    {"messages": [...]}                                       a chat conversation: its turns
                                                              before the first assistant reply
                                                              are the prompt (tang_sft.jsonl)

Every other field is a column the reward functions receive (TRL passes them the same way).
A conversational prompt is rendered with the chat template and its generation prompt
(chat_template.chat_prompt_ids: what the messages say never becomes control tokens); a plain one is
encoded as text. Refused, one line naming the line: no prompt, a prompt of the other format than
the first line's (the completions and the rewards take one format a file), and a prompt so long
that max_completion_tokens more would not fit the block size the run trains on.
"""
from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import numpy as np

from glassformer.errors import GlassformerError
from glassformer.io.jsonl import read_json_lines
from glassformer.tokenizers.chat_template import ChatTemplate, chat_prompt_ids
from glassformer.train.datasets.chat import VAL_FRACTION

FORMATS = {True: "conversational (messages)", False: "plain-text"}


class PromptData(NamedTuple):
    """N prompts: ids right-padded (N, P) with their lengths, and each line's record (the prompt
    as given, for the rewards, and its other columns)."""
    ids: np.ndarray          # (N, P) int64, padded with 0
    lengths: np.ndarray      # (N,) int64
    records: list            # N dicts: "prompt" plus the line's other fields
    conversational: bool     # prompts are message lists (completions then are too)
    tokenizer: object        # decodes completions for the rewards


def prompt_of(record) -> tuple[object, dict]:
    """(the prompt: a string or a message list, the record as the rewards see it)."""
    if not isinstance(record, dict):
        raise GlassformerError("is not a JSON object")
    if "prompt" in record:
        prompt = record["prompt"]
    elif isinstance(record.get("messages"), list):
        turns = record["messages"]
        firsts = [i for i, m in enumerate(turns) if isinstance(m, dict)
                  and m.get("role") == "assistant"]
        prompt = turns[:firsts[0]] if firsts else turns
    else:
        raise GlassformerError("has no 'prompt' (GRPO reads {\"prompt\": ...} or a chat "
                               "{\"messages\": [...]})")
    if not prompt or not isinstance(prompt, (str, list)):
        raise GlassformerError("has an empty prompt, or one that is neither text nor messages")
    columns = {key: value for key, value in record.items() if key not in ("prompt", "messages")}
    return prompt, {"prompt": prompt, **columns}


def encode_prompt_file(path: str | Path, tokenizer, template: ChatTemplate | None, *,
                       block_size: int, max_completion_tokens: int) -> PromptData:
    """Every prompt of the file as PromptData (errors name the line)."""
    rows, records = [], []
    first = None   # (line number, conversational) of the first prompt: the file's format
    for number, line in read_json_lines(path):
        try:
            prompt, record = prompt_of(line)
            if isinstance(prompt, list):
                if template is None:
                    raise GlassformerError("is conversational but the model has no chat template")
                ids = chat_prompt_ids(tokenizer, template, prompt)
            else:
                ids = tokenizer.encode(prompt)
        except GlassformerError as err:
            raise GlassformerError(f"{path} line {number} {err}") from None
        if len(ids) + max_completion_tokens > block_size:
            raise GlassformerError(
                f"{path} line {number}: its prompt of {len(ids)} ids + {max_completion_tokens} "
                f"completion tokens is longer than block size {block_size}; lower "
                "--max-completion-tokens or raise --block-size (at most the model's context)")
        first = first or (number, isinstance(prompt, list))
        if isinstance(prompt, list) != first[1]:
            raise GlassformerError(f"{path} line {number} has a {FORMATS[not first[1]]} prompt "
                                   f"but line {first[0]} a {FORMATS[first[1]]} one; a prompt "
                                   "file holds one format")
        rows.append(ids)
        records.append(record)
    lengths = np.array([len(row) for row in rows], dtype=np.int64)
    ids = np.zeros((len(rows), int(lengths.max())), dtype=np.int64)
    for n, row in enumerate(rows):
        ids[n, :len(row)] = row
    return PromptData(ids, lengths, records, first[1], tokenizer)


def split_prompts(data: PromptData) -> tuple[PromptData, PromptData]:
    """(train, val): the last VAL_FRACTION of the prompts (at least one) are val."""
    n = len(data.records)
    if n < 2:
        raise GlassformerError(f"the prompt data holds {n} prompt; at least 2 are needed (one "
                               "for the val split)")
    cut = n - max(1, int(round(n * VAL_FRACTION)))

    def part(rows: slice) -> PromptData:
        return data._replace(ids=data.ids[rows], lengths=data.lengths[rows],
                             records=data.records[rows])

    return part(slice(0, cut)), part(slice(cut, n))


def left_padded(data: PromptData, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The prompts of `rows` left-padded to the longest: (ids (B, P), mask (B, P) bool)."""
    lengths = data.lengths[rows]                                        # (B,)
    width = int(lengths.max())                                          # P
    cols = np.arange(width)[None, :]                                    # (1, P)
    mask = cols >= (width - lengths)[:, None]                           # (B, P)
    source = np.clip(cols - (width - lengths)[:, None], 0, None)        # (B, P)
    ids = np.where(mask, np.take_along_axis(data.ids[rows], source, axis=1), 0)
    return ids.astype(np.int64), mask
