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
joiner's row (`source`). With `serve --batch-invariant` the joiners are laid out and computed
so that each one's numbers are those it gets alone (`Aligned`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from glassformer.blocks.kv_cache import KVCache
from glassformer.blocks.prefill_rows import QUERIES


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
        tokens, mask, positions = self.next_columns(chunk)
        logits, _ = model.forward(tokens, attention_mask=mask, positions=positions,
                                  kv_cache=self.small, last_only=True)      # (u, 1, V)
        self.advanced(tokens.shape[1], logits[:, -1])

    def next_columns(self, chunk: int | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The next `chunk` columns (None: all that are left): tokens (u, c), the small cache's
        key mask (u, length + c) and the ids' positions (u, c)."""
        end = self.tokens.shape[1] if chunk is None else min(self.tokens.shape[1],
                                                             self.fed + chunk)
        mask = self.small_live[:, :self.small.length + end - self.fed]       # (u, S)
        return self.tokens[:, self.fed:end], mask, self.positions[:, self.fed:end]

    def advanced(self, columns: int, logits: np.ndarray) -> None:
        """`columns` more were fed (their keys written in the small cache); logits (u, V) of
        the last one."""
        self.small.length += columns
        self.fed += columns
        self.logits = logits

    def finish(self, cache, running: np.ndarray) -> np.ndarray:
        """Copy every joiner's keys into its row of `cache` (the rows running (B_max,) bool are
        kept, realigned if a prompt is longer than the timeline); (n, V) logits of each last id."""
        cache.place(self.small, self.small_live[self.source], self.source, self.rows,
                    np.concatenate(self.prompts), self.lengths[self.source], running)
        return self.logits[self.source]


@dataclass
class Aligned:
    """Joiners prefilled together, each with the numbers it gets alone (serve --batch-invariant,
    invariant.py): one column per position in the small cache (each prompt from column 0, not
    left-padded), the forward's products on fixed-shape tiles and each row attending alone by
    query blocks fixed from position 0 (blocks/prefill_rows.py, the cache's `prefill_rows`), so
    an id's numbers follow from its prompt and position only, not from the chunks or the other
    rows. The same interface as Prefill.

    Rows are kept longest prompt first, so the rows still feeding are always the first ones.
    The first `kept` ids, which every joiner's row holds from an earlier prefill (not from its
    decoded reply, computed otherwise), are copied instead of fed: the same bits."""
    rows: list[int]             # (n,) the row each joiner takes
    prompts: list[list[int]]    # n prompts
    source: np.ndarray          # (n,) each joiner's small row
    small: KVCache              # (n, K, W, D) per layer, W >= the longest prompt; `length`: fed
    small_live: np.ndarray      # (n, W) bool: column j < P_r of small row r
    lengths: np.ndarray         # (n,) each small row's prompt length, longest first
    logits: np.ndarray | None = None   # (n, V) of each small row's last id, once fed

    @classmethod
    def start(cls, cache, model, rows: list[int], prompts: list[list[int]],
              kept: int = 0) -> "Aligned":
        """Lay out the prompts joining `rows` of RowCache `cache`; their first `kept` ids (held
        by each joiner's row, prefilled there) are copied instead of fed."""
        order = np.argsort([-len(p) for p in prompts], kind="stable")      # (n,) longest first
        source = np.argsort(order)                                          # joiner -> small row
        lengths = np.array([len(prompts[i]) for i in order])                # (n,)
        width = -(-int(lengths[0]) // QUERIES) * QUERIES                    # whole query blocks
        small = model.new_cache(len(prompts), width)
        small.prefill_rows = True
        small_live = np.arange(width)[None, :] < lengths[:, None]           # (n, W)
        if kept:
            copied = np.zeros_like(small_live)
            cache.copy_prefix(small, copied, [rows[i] for i in order],
                              np.full(len(prompts), kept), kept)             # columns [0, kept)
        small.length = kept
        return cls(rows, prompts, source, small, small_live, lengths)

    @property
    def fed(self) -> int:
        return self.small.length

    @property
    def done(self) -> bool:
        return self.fed == int(self.lengths[0])

    def feed(self, model, chunk: int | None = None) -> None:
        """Feed the next chunk (`chunk` positions; None or 0: all that are left) of every prompt
        not yet in, each row's ids at the end of the forward's columns (left-padded there)."""
        start = self.fed
        end = int(self.lengths[0]) if not chunk else min(int(self.lengths[0]), start + chunk)
        feeding = int((self.lengths > start).sum())                         # rows [0, feeding)
        counts = np.minimum(self.lengths[:feeding], end) - start            # (a,) c_r >= 1
        width = int(counts.max())
        tokens = np.zeros((feeding, width), dtype=np.int64)
        positions = np.full((feeding, width), start, dtype=np.int64)        # padding: a valid one
        for r, c in enumerate(counts):
            tokens[r, width - c:] = self.prompt(r)[start:start + c]
            positions[r, width - c:] = np.arange(start, start + c)
        view = KVCache(k=[k[:feeding] for k in self.small.k], v=[v[:feeding] for v in self.small.v],
                       length=start, prefill_rows=True)
        logits, _ = model.forward(tokens, attention_mask=self.small_live[:feeding, :end],
                                  positions=positions, kv_cache=view, last_only=True)  # (a,1,V)
        if self.logits is None:
            self.logits = np.zeros((len(self.lengths), logits.shape[-1]), dtype=logits.dtype)
        last = np.flatnonzero(self.lengths[:feeding] <= end)                # their last id fed
        self.logits[last] = logits[last, -1]
        self.small.length = end

    def prompt(self, r: int) -> list[int]:
        """The prompt of small row r."""
        return self.prompts[int(np.flatnonzero(self.source == r)[0])]

    def finish(self, cache, running: np.ndarray) -> np.ndarray:
        """Copy every joiner's keys into its row of `cache`; (n, V) logits of each last id."""
        cache.place(self.small, self.small_live[self.source], self.source, self.rows,
                    np.concatenate(self.prompts), self.lengths[self.source], running)
        return self.logits[self.source]
