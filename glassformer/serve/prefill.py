"""Prefill: joining prompts computed in a small cache of their own, whole or chunk by chunk.

A prompt joining the server's running rows is fed through the model in a small KVCache of its
own (the joiners together, left-padded), then copied into its row (rows.py `RowCache.place`):

    start   the small cache, each joiner's reused prefix copied in (RowCache.copy_prefix),
            its remaining ids laid out left-padded: tokens (u, T_new)
    feed    the next `chunk` columns of tokens through the model (all of them: chunk None)
    finish  every column fed: the small rows copied into the joiners' rows, the logits of each
            prompt's last id returned

Fed in one piece, a 4,000-id prompt holds every running stream for its whole forward. With
`serve --prefill-chunk C` the engine feeds C columns between two decode steps of the running
rows, so their tokens keep coming while it is computed. A chunk's queries attend to the keys of
the chunks before it in the small cache, as one piece would: the same logits to the rounding
of the products' shapes (greedy replies are unchanged, tests/serve/test_chunked_prefill.py).

Equal prompts (a request's n choices) are computed once, in one small row, and copied into each
joiner's row (`source`). With `serve --batch-invariant` each joiner is prefilled apart instead
(`EachAlone`: a Prefill of its own, whole), so its numbers are those it gets alone.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from glassformer.blocks.kv_cache import KVCache


@dataclass
class Prefill:
    """Prompts on their way into free rows: what is fed, and how far."""
    rows: list[int]             # (n,) the row each joiner takes
    prompts: list[list[int]]    # n prompts
    source: np.ndarray          # (n,) each joiner's small row (equal prompts share one)
    small: KVCache              # (u, K, W, D) per layer; `length`: the columns written
    small_live: np.ndarray      # (u, W) bool: the columns holding each small row's ids
    tokens: np.ndarray          # (u, T_new) int64: the ids to feed, left-padded
    positions: np.ndarray       # (u, T_new) int64: their positions in their prompts
    lengths: np.ndarray         # (u,) each small row's prompt length
    fed: int = 0                # columns of tokens fed so far
    logits: np.ndarray | None = None   # (u, V) of the last column, once fed

    @classmethod
    def start(cls, cache, model, rows: list[int], prompts: list[list[int]],
              reused: list[int]) -> "Prefill":
        """Lay out the prompts joining `rows` of RowCache `cache`; the first reused[i] ids of
        prompt i are copied from its row's keys instead of being fed again."""
        first: dict = {}
        source = np.array([first.setdefault(tuple(p), i) for i, p in enumerate(prompts)])
        unique = sorted(first.values())                                 # joiners computed
        source = np.searchsorted(unique, source)                        # (n,) their small row
        lengths = np.array([len(prompts[i]) for i in unique])           # (u,) P_i
        kept = np.array([reused[i] for i in unique])                    # (u,) k_i
        fresh = lengths - kept                                          # (u,) ids to feed, >= 1
        width = int(fresh.max())                                        # T_new: fed per row
        total = width + int(kept.max())                                 # W: the small cache
        small = model.new_cache(len(unique), total)
        small_live = np.zeros((len(unique), total), dtype=bool)         # (u, W)
        # the reused keys, right-aligned to end where the fed block starts (column W - T_new)
        cache.copy_prefix(small, small_live, [rows[i] for i in unique], kept, total - width)
        cols = np.arange(width)
        small_live[:, total - width:] = cols[None, :] >= (width - fresh)[:, None]   # padding
        tokens = np.zeros((len(unique), width), dtype=np.int64)
        positions = np.zeros((len(unique), width), dtype=np.int64)
        for j, i in enumerate(unique):                                  # ragged lists -> arrays
            tokens[j, width - fresh[j]:] = prompts[i][kept[j]:]
            positions[j, width - fresh[j]:] = np.arange(kept[j], lengths[j])
        small.length = total - width
        return cls(rows, prompts, source, small, small_live, tokens, positions, lengths)

    @property
    def done(self) -> bool:
        return self.fed == self.tokens.shape[1]

    def feed(self, model, chunk: int | None = None) -> None:
        """Feed the next `chunk` columns (None: all that are left) through the model."""
        end = self.tokens.shape[1] if chunk is None else min(self.tokens.shape[1],
                                                             self.fed + chunk)
        length = self.small.length
        mask = self.small_live[:, :length + end - self.fed]                 # (u, S)
        logits, _ = model.forward(self.tokens[:, self.fed:end], attention_mask=mask,
                                  positions=self.positions[:, self.fed:end],
                                  kv_cache=self.small, last_only=True)      # (u, 1, V)
        self.small.length = length + end - self.fed
        self.fed = end
        self.logits = logits[:, -1]

    def finish(self, cache, running: np.ndarray) -> np.ndarray:
        """Copy every joiner's keys into its row of `cache` (the rows running (B_max,) bool are
        kept, realigned if a prompt is longer than the timeline); (n, V) logits of each last id."""
        cache.place(self.small, self.small_live[self.source], self.source, self.rows,
                    np.concatenate(self.prompts), self.lengths[self.source], running)
        return self.logits[self.source]


@dataclass
class EachAlone:
    """Joiners prefilled each in its own small cache, whole, as each would be alone: one
    forward per joiner and chunk, no padding beside another prompt, no reused prefix (serve
    --batch-invariant, invariant.py). The same interface as Prefill."""
    parts: list[Prefill]        # one per joiner

    @classmethod
    def start(cls, cache, model, rows: list[int], prompts: list[list[int]]) -> "EachAlone":
        return cls([Prefill.start(cache, model, [row], [prompt], [0])
                    for row, prompt in zip(rows, prompts)])

    @property
    def rows(self) -> list[int]:
        return [row for part in self.parts for row in part.rows]

    @property
    def done(self) -> bool:
        return all(part.done for part in self.parts)

    def feed(self, model, chunk: int | None = None) -> None:
        for part in self.parts:
            if not part.done:
                part.feed(model, chunk)

    def finish(self, cache, running: np.ndarray) -> np.ndarray:
        """Each joiner placed in turn (those placed before it kept if the timeline moves);
        (n, V) logits of each prompt's last id."""
        running = running.copy()
        logits = []
        for part in self.parts:
            logits.append(part.finish(cache, running))
            running[part.rows] = True
        return np.concatenate(logits)                                   # (n, V)
