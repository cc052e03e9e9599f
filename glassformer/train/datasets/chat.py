"""Chat data for supervised fine-tuning: conversations in, ids with loss on the replies only.

A chat file is JSONL in the format Hugging Face's TRL reads, one conversation a line:

    {"messages": [{"role": "user", "content": "..."}, {"role": "assistant", "content": "..."}]}

Each conversation is rendered with the model's own chat template (tokenizers/chat_template.py), so
the model is trained on exactly the layout `glassformer chat` will show it. Which ids are the
assistant's is found without knowing the template, by rendering prefixes and diffing them:

    R(messages[:i])                          everything before reply i
    R(messages[:i], add_generation_prompt)   ... plus the template's assistant header
    R(messages[:i+1])                        ... plus the reply and its end-of-turn token

    <|im_start|>user\\nhi<|im_end|>\\n<|im_start|>assistant\\nhello<|im_end|>\\n
    '----------- R(messages[:i]) ------''--- header ------''-- loss ---------'

Every render must extend the one before it (a template that rewrites earlier turns, e.g. one that
drops old reasoning, cannot be diffed and is refused in one line). The reply's span starts after
the header when the template has one, and ends at the end of R(messages[:i+1]), so the
end-of-turn token (and what the template writes after it) is learned too: that is how the model
learns to stop.

Control tokens. Everything the messages say is marked before rendering (the rule of
tokenizers/chat_template.py), so a `<|im_end|>` typed inside a message stays text; only the
control tokens the template writes itself become control ids. Each span (prompt part, reply
part) is encoded on its own with chat_template.encode_rendered, so the prompt's ids are exactly
the ids `chat` feeds the model before it writes a reply.

Batches are padded, not packed: the "sft" objective's draw (train/objectives/sft.py) takes the
next B conversations of the run's seeded shuffled epochs (train/datasets/epochs.py), cuts every
row to the longest of them (at most block_size ids of input), and pads the rest on the right
with id 0. Right padding under a causal mask is never read by a real position, and its targets are IGNORE_INDEX, so padding changes no loss and no gradient.
A conversation longer than block_size + 1 ids is truncated (its tail gets no loss); the count is
reported (`ChatData.truncated`).

A plain-text file (any other suffix) is fine-tuned with the ordinary next-token objective (loss
everywhere); train/runs/finetune.py chooses by the suffix (is_chat_file).
"""
from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import numpy as np

from glassformer.errors import GlassformerError
from glassformer.io.jsonl import read_json_lines
from glassformer.ops.cross_entropy import IGNORE_INDEX
from glassformer.tokenizers.chat_template import (ChatTemplate, check_messages, compile_template,
                                                  control_pattern, encode_rendered,
                                                  mark_control_tokens, render_chat)

PAD_ID = 0              # any id would do: right padding is never attended to nor predicted
CHAT_SUFFIXES = (".jsonl", ".json")   # files read as chat conversations; others as plain text
VAL_FRACTION = 0.05     # the last 5% of the conversations, by position, are the val split
CHAT_ROLES = ("system", "user", "assistant", "tool")   # the roles TRL's chat format knows


class ChatData(NamedTuple):
    """Encoded conversations, one row each, right-padded to the longest (N, W).

    ids[n, :lengths[n]] are conversation n's ids; targets[n, t] is ids[n, t + 1] where that id
    belongs to an assistant reply, else IGNORE_INDEX (prompt tokens, padding).
    """
    ids: np.ndarray        # (N, W) int32, padded with PAD_ID
    targets: np.ndarray    # (N, W) int32, IGNORE_INDEX where no loss counts
    lengths: np.ndarray    # (N,) int64, real ids per row (after truncation)
    truncated: int         # how many conversations were cut to block_size + 1 ids
    skipped: int = 0       # how many were left out for an empty assistant turn (nothing to learn)


def is_chat_file(path: str | Path) -> bool:
    """Whether a data file is read as chat JSONL (by its suffix) rather than plain text."""
    return Path(path).suffix.lower() in CHAT_SUFFIXES


# --- reading ----------------------------------------------------------------------------------

def read_conversations(path: str | Path) -> list[tuple[int, list[dict]]]:
    """(line number, messages) for every non-blank line of a chat JSONL file.

    Raises GlassformerError naming the line for a line that is not a JSON object with a
    non-empty `messages` list of dicts with string roles, or with a role not in CHAT_ROLES (a
    typo such as "asistant" would otherwise train as prompt text). A byte-order mark and CRLF
    line ends are read as editors mean them (io/jsonl.py).
    """
    conversations = []
    for number, record in read_json_lines(path, "conversations"):
        where = f"{path} line {number}"
        if not isinstance(record, dict) or "messages" not in record:
            raise GlassformerError(f"{where} is not an object with 'messages' (the chat "
                                   'format is {"messages": [{"role": ..., "content": ...}]})')
        try:
            messages = check_messages(record["messages"])
        except GlassformerError as err:
            raise GlassformerError(f"{where}: {err}") from None
        for index, message in enumerate(messages):
            if message["role"] not in CHAT_ROLES:
                raise GlassformerError(f"{where}: message {index} has role "
                                       f"{message['role']!r}; expected one of "
                                       f"{', '.join(CHAT_ROLES)}")
        conversations.append((number, messages))
    return conversations


# --- finding the replies ----------------------------------------------------------------------

def reply_spans(template: ChatTemplate, marked: list[dict], compiled=None
                ) -> tuple[str, list[tuple[int, int]]]:
    """(the rendered conversation up to its last reply, [(start, end) of each reply's text]).

    `marked`: messages whose control tokens are already marked (chat_template.mark_control_tokens).
    compiled: template.source already compiled (chat_template.compile_template), to render faster.
    """
    def render(messages, header=False):
        return render_chat(compiled or template.source, messages, add_generation_prompt=header,
                           budget=template.budget, **template.variables)

    replies = [i for i, message in enumerate(marked) if message["role"] == "assistant"]
    if not replies:
        raise GlassformerError("the conversation has no assistant turn, so nothing to learn")
    if replies[0] == 0:
        raise GlassformerError("the conversation starts with an assistant turn, which answers "
                               "nothing; put a user (or system) message first")
    text = render(marked[:replies[-1] + 1])
    spans = []
    for i in replies:
        before, done = render(marked[:i]), render(marked[:i + 1])
        if not (done.startswith(before) and text.startswith(done)):
            raise GlassformerError(
                f"the chat template does not render message {i} as an addition to the ones "
                "before it, so the reply's tokens cannot be found by diffing renders")
        prompt = render(marked[:i], header=True)
        start = len(prompt) if done.startswith(prompt) else len(before)
        spans.append((start, len(done)))
    return text, spans


def encode_conversation(tokenizer, template: ChatTemplate, messages: list[dict], compiled=None
                        ) -> tuple[list[int], list[bool]]:
    """(ids, in_reply): the conversation's ids and, per id, whether it belongs to a reply.
    compiled: as reply_spans'."""
    pattern = control_pattern(tokenizer.special_tokens)
    marked = mark_control_tokens(messages, pattern)
    text, spans = reply_spans(template, marked, compiled)
    ids: list[int] = []
    in_reply: list[bool] = []
    cursor = 0   # where the text not yet encoded begins
    for start, end in spans:
        for piece, learned in ((text[cursor:start], False), (text[start:end], True)):
            piece_ids = encode_rendered(tokenizer, piece) if piece else []
            ids.extend(piece_ids)
            in_reply.extend([learned] * len(piece_ids))
        cursor = end
    return ids, in_reply


def encode_chat_file(path: str | Path, tokenizer, template: ChatTemplate, *,
                     block_size: int) -> ChatData:
    """Every conversation of a chat JSONL file, encoded and padded into one ChatData.

    Errors name the line: a line that is not a conversation, one with no assistant turn, one the
    template refuses (a role it rejects, ...).
    """
    rows, masks = [], []
    truncated = skipped = 0
    conversations = read_conversations(path)
    compiled = compile_template(template.source, template.budget)   # once: costs ~100 renders
    for number, messages in conversations:
        if any(message["role"] == "assistant" and not str(message.get("content") or "").strip()
               for message in messages):
            skipped += 1   # an empty reply teaches only to stop at once: reported, not learned
            continue
        try:
            ids, in_reply = encode_conversation(tokenizer, template, messages, compiled)
        except GlassformerError as err:
            raise GlassformerError(f"{path} line {number}: {err}") from None
        if len(ids) > block_size + 1:
            ids, in_reply = ids[:block_size + 1], in_reply[:block_size + 1]
            truncated += 1
        rows.append(ids)
        masks.append(in_reply)
    if not rows:
        raise GlassformerError(f"{path}: every conversation has an empty assistant turn")
    return pad_rows(rows, masks, truncated)._replace(skipped=skipped)


def pad_rows(rows: list[list[int]], masks: list[list[bool]], truncated: int = 0) -> ChatData:
    """ChatData from per-conversation ids and reply flags (right-padded to the longest)."""
    lengths = np.array([len(row) for row in rows], dtype=np.int64)      # (N,)
    width = int(lengths.max())                                          # W
    ids = np.full((len(rows), width), PAD_ID, dtype=np.int32)           # (N, W)
    learned = np.zeros((len(rows), width), dtype=bool)                  # (N, W)
    for n, (row, mask) in enumerate(zip(rows, masks)):
        ids[n, :len(row)] = row
        learned[n, :len(mask)] = mask
    # target t is id t + 1, counted only where that id is part of a reply
    targets = np.full_like(ids, IGNORE_INDEX)                           # (N, W)
    targets[:, :-1] = np.where(learned[:, 1:], ids[:, 1:], IGNORE_INDEX)
    if not (targets != IGNORE_INDEX).any():
        raise GlassformerError("no conversation has a reply token left to learn")
    return ChatData(ids=ids, targets=targets, lengths=lengths, truncated=truncated)


def split_chat(data: ChatData) -> tuple[ChatData, ChatData]:
    """(train, val): the last VAL_FRACTION of the conversations (at least one) are val."""
    n = data.ids.shape[0]
    if n < 2:
        raise GlassformerError(f"the chat data holds {n} conversation; at least 2 are needed "
                               "(one for the val split)")
    n_val = max(1, int(round(n * VAL_FRACTION)))
    cut = n - n_val

    def part(rows: slice) -> ChatData:
        return ChatData(data.ids[rows], data.targets[rows], data.lengths[rows], data.truncated)

    return part(slice(0, cut)), part(slice(cut, n))
