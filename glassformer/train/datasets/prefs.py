"""Preference pairs for DPO: TRL's two preference formats in, padded chosen/rejected ids out.

One JSON object a line, with an explicit prompt (TRL's "explicit prompt" preference format):

    conversational  {"prompt": [{"role": "user", ...}], "chosen": [{"role": "assistant", ...}],
                     "rejected": [{"role": "assistant", ...}]}
    plain strings   {"prompt": "...", "chosen": "...", "rejected": "..."}

Which tokens are the completion, exactly as TRL's DPOTrainer (`_prepare_dataset`) finds them:

    conversational  P = ids of R(prompt, add_generation_prompt)   the generation prompt included
                    F = ids of R(prompt + chosen)                 reply, end-of-turn and all
    plain           P = ids of prompt, F = ids of prompt + chosen, then the eos id (TRL appends
                    the eos token to a completion that lacks it)
    completion      F[k:], k = the common prefix of P with both F's (normally len(P))

so the completion is what the chat template writes after the assistant header: the reply, its
end-of-turn token and whatever the template puts after it. Rendering and control tokens follow
train/datasets/chat.py: what the messages say is marked first, so a typed `<|im_end|>` stays text.

Layout (PrefData): the N pairs' chosen rows, then their rejected rows, right-padded as chat
data (chat.pad_rows: targets are IGNORE_INDEX outside the completion). The "dpo" objective's draw
takes B pairs and returns their 2B rows in one batch, chosen first, as TRL's collator does.

Refused, one line naming the line: a record without a prompt, chosen or rejected, a chosen equal
to its rejected (no preference to learn), an empty completion (a chosen or rejected with no text:
"" or only spaces, or messages whose contents are: TRL would train on the end-of-turn token
alone; SFT leaves such a reply out too), a file that mixes the two formats (TRL reads one format a
dataset; the line that differs is named, with the first line of the other), and a pair longer
than block_size + 1 ids (the context the run trains on).
"""
from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import numpy as np

from glassformer.errors import GlassformerError
from glassformer.io.jsonl import read_json_lines
from glassformer.tokenizers.chat_template import (ChatTemplate, check_messages, compile_template,
                                                  control_pattern, encode_rendered,
                                                  mark_control_tokens, render_chat)
from glassformer.tokenizers.end_of_text import end_of_text_ids
from glassformer.train.datasets.chat import VAL_FRACTION, ChatData, pad_rows

FIELDS = ("prompt", "chosen", "rejected")
FORMATS = {True: "conversational (message lists)", False: "plain strings"}


class PrefData(NamedTuple):
    """N preference pairs: rows [0, N) of `rows` are the chosen, rows [N, 2N) the rejected."""
    rows: ChatData      # (2N, W) ids, targets, lengths
    n: int              # N pairs


def common_prefix(a: list[int], b: list[int]) -> int:
    """How many leading ids a and b share."""
    n = min(len(a), len(b))
    differ = np.nonzero(np.asarray(a[:n]) != np.asarray(b[:n]))[0]
    return int(differ[0]) if len(differ) else n


def check_pair(record) -> bool:
    """Whether the pair is conversational (message lists) or plain strings; one line if neither,
    or when it has nothing to prefer."""
    if not isinstance(record, dict):
        raise GlassformerError("is not a JSON object")
    for field in FIELDS:
        if field not in record:
            raise GlassformerError(f"has no {field!r} (the preference format is {{\"prompt\": "
                                   "..., \"chosen\": ..., \"rejected\": ...}})")
    conversational = isinstance(record["prompt"], list)
    kind = list if conversational else str
    for field in FIELDS:
        if not isinstance(record[field], kind):
            what = "a message list" if conversational else "a string"
            raise GlassformerError(f"{field!r} must be {what}, like the prompt")
    for side in ("chosen", "rejected"):
        if not has_text(record[side]):
            raise GlassformerError(f"has an empty {side!r}: a completion needs text to prefer "
                                   "or to avoid")
    if record["chosen"] == record["rejected"]:
        raise GlassformerError("chosen equals rejected, so there is no preference to learn")
    return conversational


def has_text(completion) -> bool:
    """Whether a completion (a string, or a message list) says anything but spaces."""
    if isinstance(completion, str):
        return bool(completion.strip())
    return any(isinstance(m, dict) and str(m.get("content") or "").strip() for m in completion)


def eos_ids(tokenizer, template: ChatTemplate) -> list[int]:
    """[the eos id] TRL appends to a plain completion: the tokenizer's named eos_token, else its
    first end-of-text special; [] when it has none."""
    named = template.variables.get("eos_token")
    if named in tokenizer.special_tokens:
        return [tokenizer.special_tokens[named]]
    return end_of_text_ids(tokenizer)[:1]


def pair_ids(tokenizer, template: ChatTemplate, compiled, record: dict
             ) -> tuple[list[int], list[int], list[int]]:
    """(prompt ids, chosen completion ids, rejected completion ids) of one pair (see above)."""
    if check_pair(record):
        pattern = control_pattern(tokenizer.special_tokens)
        marked = {field: mark_control_tokens(check_messages(record[field]), pattern)
                  for field in FIELDS}

        def render(messages, header=False):
            text = render_chat(compiled, messages, add_generation_prompt=header,
                               **template.variables)
            return encode_rendered(tokenizer, text)

        prompt = render(marked["prompt"], header=True)
        full = [render(marked["prompt"] + marked[side]) for side in ("chosen", "rejected")]
    else:
        eos = eos_ids(tokenizer, template)
        prompt = tokenizer.encode(record["prompt"])
        full = [tokenizer.encode(record["prompt"] + record[side]) + eos
                for side in ("chosen", "rejected")]
    cut = min(common_prefix(prompt, ids) for ids in full)
    chosen, rejected = full[0][cut:], full[1][cut:]
    if not chosen or not rejected:
        raise GlassformerError("a completion renders to no tokens")
    return prompt[:cut], chosen, rejected


def check_pref_file(path: str | Path) -> list[tuple[int, dict]]:
    """The file's (line number, record) pairs, each checked as check_pair checks it and all of
    one format; errors name the line. Needs no tokenizer: `finetune` calls it before the model
    loads, so a bad line costs no model's memory."""
    records = read_json_lines(path)
    first = None   # (line number, format) of the first pair: every other must share its format
    for number, record in records:
        try:
            conversational = check_pair(record)
        except GlassformerError as err:
            raise GlassformerError(f"{path} line {number} {err}") from None
        first = first or (number, conversational)
        if conversational != first[1]:
            raise GlassformerError(
                f"{path} line {number} is {FORMATS[conversational]} but line {first[0]} is "
                f"{FORMATS[first[1]]}; a preference file holds one format")
    return records


def encode_pref_file(path: str | Path, tokenizer, template: ChatTemplate, *,
                     block_size: int) -> PrefData:
    """Every pair of a preference JSONL file as PrefData (errors name the line)."""
    chosen_rows, rejected_rows, chosen_masks, rejected_masks = [], [], [], []
    compiled = compile_template(template.source, template.budget)
    for number, record in check_pref_file(path):
        try:
            prompt, chosen, rejected = pair_ids(tokenizer, template, compiled, record)
        except GlassformerError as err:
            raise GlassformerError(f"{path} line {number} {err}") from None
        longest = len(prompt) + max(len(chosen), len(rejected))
        if longest > block_size + 1:
            raise GlassformerError(f"{path} line {number} is {longest} ids long, more than block "
                                   f"size {block_size} + 1; raise --block-size (at most the "
                                   "model's context) or shorten the pair")
        for rows, masks, completion in ((chosen_rows, chosen_masks, chosen),
                                        (rejected_rows, rejected_masks, rejected)):
            rows.append(prompt + completion)
            masks.append([False] * len(prompt) + [True] * len(completion))
    data = pad_rows(chosen_rows + rejected_rows, chosen_masks + rejected_masks)
    return PrefData(rows=data, n=len(chosen_rows))


def pair_rows(data: PrefData, pairs: np.ndarray) -> np.ndarray:
    """The rows of `pairs` (B,) in one batch: their chosen, then their rejected (2B,)."""
    return np.concatenate([pairs, pairs + data.n])


def split_prefs(data: PrefData) -> tuple[PrefData, PrefData]:
    """(train, val): the last VAL_FRACTION of the pairs (at least one) are val."""
    if data.n < 2:
        raise GlassformerError(f"the preference data holds {data.n} pair; at least 2 are "
                               "needed (one for the val split)")
    n_val = max(1, int(round(data.n * VAL_FRACTION)))
    cut = data.n - n_val

    def part(start: int, stop: int) -> PrefData:
        rows = pair_rows(data, np.arange(start, stop))
        chat = data.rows
        return PrefData(ChatData(chat.ids[rows], chat.targets[rows], chat.lengths[rows], 0),
                        stop - start)

    return part(0, cut), part(cut, data.n)
