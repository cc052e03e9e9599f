"""Sequence: one reply being written (one choice of one request), from its prompt ids to events.

The engine (engine.py) picks each new token; the sequence turns tokens into the events a client
reads, in the engine's thread:

    token id --stream_text--> text that is complete (a Chinese character may take 2-3 tokens)
             --stop strings--> text sure not to be the start of a stop string is sent; a stop
                               string found ends the reply there (it is not sent, as OpenAI)
             --> Delta(text, tokens) ... then Finished(reason, usage)

A chat reply of a reasoning model (`reasoning`, reasoning.py's Reasoning) is split once more:
its thinking's Deltas have `reasoning` True, its answer's False.

Each event goes to `on_event` (the server hands it to its asyncio loop). A sequence ends at a
stop id (the tokenizer's end of text or turn: reason "stop", the id not part of the reply), a
stop string ("stop"), max_tokens ("length") or when its client leaves (`cancelled`, set from
another thread and read by the engine before every step).
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Callable, NamedTuple

import numpy as np

from glassformer.generate.sampling import Sampling
from glassformer.generate.stream import stream_text


class TokenInfo(NamedTuple):
    """A reply token with its log-probability and the most likely alternatives."""
    text: str                            # the token decoded alone (may hold U+FFFD halves)
    logprob: float | None                # None: an echoed prompt's first token
    top: list[tuple[str, float]] | None  # (text, logprob) of the top tokens, most likely first


def likeliest(logp: np.ndarray, k: int) -> np.ndarray:
    """The k likeliest token ids of each row of log-probabilities (N, V), most likely first
    (ties in id order): (N, k), (N, 0) for k 0. The alternatives of `TokenInfo.top`."""
    if k <= 0:
        return np.zeros((len(logp), 0), dtype=np.int64)
    some = np.argpartition(-logp, k - 1, axis=-1)[:, :k]                  # (N, k) unordered
    order = np.argsort(-np.take_along_axis(logp, some, axis=-1), axis=-1, kind="stable")
    return np.take_along_axis(some, order, axis=-1)                       # (N, k)


class Delta(NamedTuple):
    """New reply text and the tokens that made it ('' with tokens while a character is cut)."""
    index: int
    text: str
    tokens: list[TokenInfo]
    reasoning: bool = False              # text of the thinking (reasoning.py), not the answer


class Usage(NamedTuple):
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int                   # prompt ids whose keys were reused from a cached row


class Finished(NamedTuple):
    index: int
    reason: str                          # "stop", "length", "cancelled" or "error"
    usage: Usage
    message: str = ""                    # what went wrong, for "error"


@dataclass
class Settings:
    """What a request asks of its reply."""
    max_tokens: int
    sampling: Sampling = Sampling()      # how each token is chosen (generate/sampling.py)
    seed: int | None = None              # of this reply's own generator
    stop: tuple[str, ...] = ()           # stop strings
    logprobs: int | None = None          # None: none; k >= 0: the chosen token's and top k
    logprob_of_stop: bool = False        # echo: a stop id ending the reply is listed in its
                                         # logprobs (as OpenAI and vLLM; not in its text)


class _Feed:
    """The ids stream_text reads, one appended before each read (it never waits)."""

    def __init__(self):
        self.ids: deque[int] = deque()

    def __iter__(self):
        return self

    def __next__(self) -> int:
        if not self.ids:
            raise StopIteration
        return self.ids.popleft()


@dataclass
class Sequence:
    """One reply: its prompt, settings, progress and where its events go."""
    index: int                           # its choice number within the request
    prompt: list[int]
    settings: Settings
    stop_ids: frozenset
    tokenizer: object
    on_event: Callable[[object], None]
    rng: np.random.Generator = None
    cancelled: bool = False              # set by the server when the client leaves
    constraint: object = None            # a RowConstraint (response_format), or None
    reasoning: object = None             # a Reasoning (reasoning.py): thinking split off
    cached_tokens: int = 0
    new_tokens: int = 0
    finished: bool = False
    output: list = field(default_factory=list)   # the reply's ids: what penalties read
    submitted_at: float = 0.0            # perf_counter() when queued (metrics.py's TTFT)
    last_token_at: float | None = None   # perf_counter() of its last token (None: none yet)

    def __post_init__(self):
        self.rng = np.random.default_rng(self.settings.seed)
        self.feed = _Feed()
        self.text = stream_text(self.tokenizer, self.feed)
        self.held = ""                   # text not sent yet: it may begin a stop string
        self.pending: list[TokenInfo] = []

    def accept(self, token_id: int, info: TokenInfo | None) -> None:
        """Take the engine's next token: send the text it completes, finish when it ends."""
        if token_id in self.stop_ids:
            if info is not None and self.settings.logprob_of_stop:
                self.pending.append(info)
            self.finish("stop")
            return
        self.new_tokens += 1
        self.output.append(token_id)
        if info is not None:
            self.pending.append(info)
        if self.reasoning is not None:
            self.reasoning.count()
        self.feed.ids.append(token_id)
        step = next(self.text)
        if self.add_text(step.text):
            return
        if self.new_tokens >= self.settings.max_tokens:
            self.finish("length")

    def add_text(self, text: str) -> bool:
        """Send what of held + text cannot start a stop string; True when a stop string ended
        the reply."""
        held = self.held + text
        found = [held.find(stop) for stop in self.settings.stop if stop in held]
        if found:
            self.send(held[:min(found)], last=True)
            self.held = ""
            self.finish("stop", flush=False)
            return True
        keep = max((longest_overlap(held, stop) for stop in self.settings.stop), default=0)
        self.send(held[:len(held) - keep])
        self.held = held[len(held) - keep:]
        return False

    def send(self, text: str, last: bool = False) -> None:
        if self.reasoning is not None:
            return self.send_split(text, last)
        if text or self.pending:
            self.on_event(Delta(self.index, text, self.pending))
            self.pending = []

    def send_split(self, text: str, last: bool) -> None:
        """A reasoning model's text as thinking and answer Deltas (the tokens go with the
        first; they wait for text while it is held back, unless this is the last send)."""
        parts = self.reasoning.split(text) + (self.reasoning.flush() if last else [])
        if not parts and last and self.pending:
            parts = [(self.reasoning.thinking, "")]
        for thinking, piece in parts:
            self.on_event(Delta(self.index, piece, self.pending, thinking))
            self.pending = []

    def usage(self) -> Usage:
        return Usage(len(self.prompt), self.new_tokens, self.cached_tokens)

    def finish(self, reason: str, *, flush: bool = True, message: str = "") -> None:
        """End the reply: send what is held back (a cut character at the very end) first."""
        if self.finished:
            return
        self.finished = True
        if flush and reason != "cancelled":
            tail = "".join(step.text for step in self.text)      # the feed is empty: a flush
            self.send(self.held + tail, last=True)
        self.on_event(Finished(self.index, reason, self.usage(), message))


def longest_overlap(text: str, stop: str) -> int:
    """The length of the longest end of `text` that is a proper beginning of `stop`."""
    for size in range(min(len(text), len(stop) - 1), 0, -1):
        if text.endswith(stop[:size]):
            return size
    return 0
