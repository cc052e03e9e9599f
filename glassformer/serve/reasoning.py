"""Reasoning models: a reply's thinking kept apart from its answer, and a budget that ends it.

Qwen3, DeepSeek-R1 and QwQ write `<think> ... </think>` before they answer. As vLLM does, a
chat reply is split on those tags: the text between them is `message.reasoning` (streamed as
`delta.reasoning`), what follows is `message.content`; the tags themselves are in neither, nor
the blank lines right after a tag. Thinking begins either in the prompt (a template that ends its
generation prompt with an open `<think>`, as DeepSeek-R1's does) or with the reply's very first
text; a `<think>` anywhere later is plain text. With Qwen3's `enable_thinking: false` (a
`chat_template_kwargs` field) the template closes the thinking in the prompt, and the whole
reply is content.

The split works on text (a tag may be one control token, as in Qwen3's vocabulary, or several
plain ones), holding back a piece that may be the start of a tag, as stop strings are held back
(sequence.py). The budget counts the tokens written while thinking; past it the next tokens are
the closing tag's ids, put in place of what the model sampled (the engine asks `next_forced`),
so the answer starts. A row with a response_format grammar is never forced (the grammar decides).

    text pieces --split--> [(True, thinking text), (False, answer text), ...]
"""
from __future__ import annotations

from collections import deque
from typing import NamedTuple

from glassformer.errors import GlassformerError
from glassformer.serve.sequence import longest_overlap
from glassformer.tokenizers.chat_template import chat_template_of

START, END = "<think>", "</think>"
OPENING, THINKING, ANSWERING = "opening", "thinking", "answering"   # a Reasoning's states


class Thinking(NamedTuple):
    """How a server's chat replies are split: the closing tag's ids, the budget (None: none)."""
    closing: list[int]
    budget: int | None

    def start(self, tokenizer, prompt: list[int]) -> "Reasoning":
        """One reply's Reasoning, inside the thinking when its prompt opened it."""
        return Reasoning(opens_thinking(tokenizer, prompt), self.budget, self.closing)


def thinking_of(model, template_budget=None, budget: int | None = None) -> Thinking | None:
    """The model's Thinking, None when its replies are not split (no chat template, or one
    and a tokenizer without the tags)."""
    try:
        source = chat_template_of(model.tokenizer, template_budget).source
    except GlassformerError:
        return None
    return Thinking(end_ids(model.tokenizer), budget) if thinks(model.tokenizer, source) \
        else None


def thinks(tokenizer, template_source: str) -> bool:
    """Whether replies are split: the closing tag is one of the tokenizer's control tokens, or
    the chat template writes it."""
    return END in tokenizer.special_tokens or END in template_source


def end_ids(tokenizer) -> list[int]:
    """The ids the budget forces: the closing tag's control token, else its text's ids."""
    specials = tokenizer.special_tokens
    return [specials[END]] if END in specials else tokenizer.encode(END)


def opens_thinking(tokenizer, prompt: list[int]) -> bool:
    """Whether the prompt leaves a `<think>` open (the reply starts inside the thinking)."""
    text = tokenizer.decode(prompt)
    return text.rfind(START) > text.rfind(END)


class Reasoning:
    """One reply's split and budget. budget: thinking tokens allowed (None: no limit)."""

    def __init__(self, thinking: bool, budget: int | None, closing: list[int]):
        self.state = THINKING if thinking else OPENING
        self.strip = thinking          # blank text right after a tag is dropped
        self.held = ""                 # text that may be the start of a tag
        self.budget, self.spent = budget, 0
        self.closing = closing
        self.forced: deque[int] = deque()
        self.closed_by_budget = False

    @property
    def thinking(self) -> bool:
        return self.state == THINKING

    def count(self) -> None:
        """One more token written while thinking (called before its text is split)."""
        if self.thinking:
            self.spent += 1

    def next_forced(self) -> int | None:
        """The id to put in place of the sampled one: the closing tag once the budget is
        spent, one id per step."""
        if (self.thinking and self.budget is not None and self.spent >= self.budget
                and not self.closed_by_budget):
            self.closed_by_budget = True
            self.forced.extend(self.closing)
        return self.forced.popleft() if self.forced else None

    def split(self, text: str) -> list[tuple[bool, str]]:
        """New text as (is_thinking, text) parts; a possible tag's start is held back."""
        parts: list[tuple[bool, str]] = []
        held = self.held + text
        while True:
            if self.strip:
                held = held.lstrip()
                if not held:
                    self.held = ""
                    return parts
                self.strip = False
            if self.state == OPENING:
                if held.startswith(START):
                    held, self.state, self.strip = held[len(START):], THINKING, True
                    continue
                if START.startswith(held):          # "<thi": wait for more
                    self.held = held
                    return parts
                self.state = ANSWERING
            if self.state == THINKING:
                at = held.find(END)
                if at >= 0:
                    add(parts, True, held[:at])
                    held, self.state, self.strip = held[at + len(END):], ANSWERING, True
                    continue
                keep = longest_overlap(held, END)
                add(parts, True, held[:len(held) - keep])
                self.held = held[len(held) - keep:]
                return parts
            add(parts, False, held)
            self.held = ""
            return parts

    def flush(self) -> list[tuple[bool, str]]:
        """The text held back, at the reply's end."""
        held, self.held = self.held, ""
        return [(self.thinking, held)] if held else []


def add(parts: list, thinking: bool, text: str) -> None:
    if text:
        parts.append((thinking, text))


def force_rows(ids, seqs) -> None:
    """Put each row's forced id (the budget's closing tag) in place of its sampled one, in
    place in `ids` (n,); rows without a Reasoning, or with a grammar, keep theirs."""
    for i, seq in enumerate(seqs):
        if seq.reasoning is not None and seq.constraint is None:
            forced = seq.reasoning.next_forced()
            if forced is not None:
                ids[i] = forced
