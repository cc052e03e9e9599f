"""RowCache: one preallocated KV cache shared by every request a server decodes at once.

Continuous batching needs rows that start and end at different times, but a `KVCache` has one
`length` for all its rows (every row of one forward writes at the same column). So the columns
are a shared timeline, and each row keeps a `live` mask of the columns that hold its own tokens:

    column:     0   1   2   3   4   5   6   7   8        length = 8: the next step writes here
    row 0:      .   .   a0  a1  a2  a3  a4  a5  a6       joined at column 2
    row 1:      .   .   .   .   .   .   b0  b1  b2       joined later, prompt of 2 ids
    row 2:      c0  c1  c2  c3  .   .   .   .   .        finished: its ids stay for prefix reuse

The key mask of a forward is `live` (masked keys get exactly zero weight, ops/softmax.py) and
each row's positions count its own live columns, so a row's tokens are the ones it would get
alone. A joining prompt is prefilled in a small cache of its own (joiners together, left-padded,
`prefill`; prefill.py, whole or in chunks) and copied into its row, ending at column `length`;
so it joins the next decode step without making the other rows compute its prompt. When the
timeline is full, `realign` moves every running row's live columns to end at one column, as one
gather per layer; a prompt longer than `length` only lengthens the timeline (no column moves).

A free row keeps the ids of its last request: a new prompt that shares a prefix with them (the
next turn of a chat) copies those keys instead of recomputing them (`reuse`).

Every copy and gather here indexes rows and columns only, so `k` and `v` may differ in width:
DeepSeek-V3's latent cache (blocks/kv_cache.py KVLayout: k the latent R, v the RoPE key Dr) is
served the same way.

A hybrid model (Qwen3-Next, Qwen3.5: blocks/delta_state.py HybridCache) keeps the keys and
values of its full-attention layers in these columns, and per row a fixed-size state for each
linear-attention layer, which has no columns: it is the row's whole past. A joining prompt's
state is copied into its row with its keys (`place`); realigning moves keys only; an idle row
fed a placeholder in a decode step spoils only its own state, which the next joiner there
replaces. A free row's held ids are not reused for a hybrid (`reuse` is 0): its state has run on
past them and cannot be cut back to a shared prefix.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from glassformer.blocks.delta_state import HybridCache
from glassformer.blocks.kv_cache import KVCache
from glassformer.serve.prefill import Prefill


@dataclass
class RowCache:
    """Generation state of a server: the shared cache, which columns each row owns, its ids."""
    cache: KVCache          # (B_max, K, T_max, D) per layer (MLA: k R wide, v Dr); `length`
                            # is the timeline's end
    live: np.ndarray        # (B_max, T_max) bool: the columns holding each row's tokens
    ids: np.ndarray         # (B_max, T_max) int64: the id whose keys sit in each live column

    @classmethod
    def allocate(cls, model, rows: int, max_len: int, *,
                 batch_invariant: bool = False) -> "RowCache":
        """batch_invariant: decoded steps compute each row apart (engine.py, KVCache's flag)."""
        cache = model.new_cache(rows, max_len)
        cache.batch_invariant = batch_invariant
        return cls(cache, np.zeros((rows, max_len), dtype=bool),
                   np.zeros((rows, max_len), dtype=np.int64))

    @staticmethod
    def bytes_for(model, rows: int, max_len: int) -> int:
        """Bytes `allocate(model, rows, max_len)` takes, and at worst `prefill` beside it (every
        row joining at once with a prompt of max_len ids: a small cache as large again), asked
        before allocating: the cache's own count (`Model.cache_bytes`), `live` and `ids`."""
        per_position = np.dtype(bool).itemsize + np.dtype(np.int64).itemsize   # live + ids
        return 2 * (model.cache_bytes(rows, max_len) + rows * max_len * per_position)

    @property
    def max_len(self) -> int:
        return self.cache.max_len

    def view(self, rows: int, first: int = 0) -> KVCache:
        """Rows [first, rows) as a KVCache of views: what a forward writes lands here (a
        hybrid's: the first rows only, `first` 0)."""
        if isinstance(self.cache, HybridCache):
            return self.cache.first_rows(rows)
        return KVCache(k=[k[first:rows] for k in self.cache.k],
                       v=[v[first:rows] for v in self.cache.v],
                       length=self.cache.length, batch_invariant=self.cache.batch_invariant)

    def first_of(self, decodable: np.ndarray) -> int:
        """The first row a decode step computes: the first decodable one, so a reply running
        alone in row 5 steps one row, not six (rows [0, 5) idle); 0 for a hybrid (its rows'
        states are taken from the first row) and a batch-invariant cache (every row, always)."""
        if isinstance(self.cache, HybridCache) or self.cache.batch_invariant:
            return 0
        return int(np.flatnonzero(decodable)[0])

    def forget(self, row: int) -> None:
        self.live[row] = False

    def held(self, row: int) -> np.ndarray:
        """The ids row `row` holds, in order."""
        return self.ids[row, self.live[row]]

    def realign(self, end: int, keep: np.ndarray) -> None:
        """Move the live columns of the rows in `keep` (B_max,) bool to end at column `end`
        (same order, no gaps) and forget the other rows; the timeline's length becomes `end`."""
        for row in np.flatnonzero(~keep):
            self.forget(int(row))
        counts = self.live.sum(axis=1)                                  # (B,)
        # each row's live columns first, in order (a stable sort of "not live")
        order = np.argsort(~self.live, axis=1, kind="stable")           # (B, T_max)
        cols = np.arange(self.max_len)
        start = end - counts[:, None]                                   # (B, 1)
        slot = np.clip(cols[None, :] - start, 0, self.max_len - 1)      # (B, T_max)
        source = np.take_along_axis(order, slot, axis=1)                # (B, T_max) old column
        gather = source[:, None, :, None]                               # (B, 1, T_max, 1)
        self.ids = np.take_along_axis(self.ids, source, axis=1)         # (B, T_max)
        for layer in range(len(self.cache.k)):
            self.cache.k[layer][...] = np.take_along_axis(self.cache.k[layer], gather, axis=2)
            self.cache.v[layer][...] = np.take_along_axis(self.cache.v[layer], gather, axis=2)
        self.live = (cols[None, :] >= start) & (cols[None, :] < end)   # (B, T_max)
        self.cache.length = int(end)

    def reuse(self, row: int, prompt: list[int]) -> int:
        """How many leading prompt ids row `row` already holds (at least one id is left to
        feed, since the last prompt id's logits give the first new token); 0 for a hybrid."""
        if isinstance(self.cache, HybridCache):
            return 0
        held = self.held(row)
        n = min(len(held), len(prompt) - 1)
        differ = np.flatnonzero(held[:n] != np.asarray(prompt[:n]))
        return int(differ[0]) if differ.size else n

    def decode(self, model, rows: int, tokens: np.ndarray, active: np.ndarray,
               first: int = 0) -> np.ndarray:
        """One step for rows [first, rows) (n of them): feed tokens (n,) to the active ones
        (n,) bool, each at its own next position; returns the last logits (n, V)."""
        positions, key_mask = self.step_inputs(rows, active, first)
        logits, _ = model.forward(tokens[:, None], attention_mask=key_mask, positions=positions,
                                  kv_cache=self.view(rows, first), last_only=True)   # (n, 1, V)
        self.stepped(rows, tokens, active, first)
        return logits[:, -1]

    def step_inputs(self, rows: int, active: np.ndarray,
                    first: int = 0) -> tuple[np.ndarray, np.ndarray]:
        """Before a step of rows [first, rows) (active (n,) bool): realign a full timeline;
        each row's next position (n, 1) and the key mask (n, length + 1)."""
        if self.cache.length + 1 > self.max_len:
            self.realign(int(self.live[first:rows][active].sum(axis=1).max()),
                         np.pad(active, (first, len(self.live) - rows)))
        length = self.cache.length
        held = self.live[first:rows].sum(axis=1)                        # (n,) tokens so far
        positions = np.where(active, held, 0)[:, None]                  # (n, 1) the next one
        key_mask = self.live[first:rows, :length + 1].copy()            # (n, S)
        key_mask[:, length] = True      # idle rows too: a row with no key at all gives nothing
        return positions, key_mask

    def stepped(self, rows: int, tokens: np.ndarray, active: np.ndarray, first: int = 0) -> None:
        """After a step wrote tokens (n,) at column `length` in rows [first, rows): the active
        ones own it."""
        length = self.cache.length
        self.cache.length = length + 1
        self.live[first:rows, length] = active
        self.ids[first:rows, length] = tokens

    def prefill(self, model, rows: list[int], prompts: list[list[int]], reused: list[int],
                running: np.ndarray) -> np.ndarray:
        """Prefill prompts into free rows `rows` in one piece (prefill.py), the first reused[i]
        ids of prompt i already held by its row; returns the logits (n, V) of each prompt's last
        id. The prompts end at column `length`; the rows running (B_max,) bool are moved
        (realign) if one prompt is longer than that. Equal prompts are computed once.
        """
        joining = Prefill.start(self, model, rows, prompts, reused)
        joining.feed(model)
        return joining.finish(self, running)

    def copy_prefix(self, small: KVCache, small_live: np.ndarray, rows: list[int],
                    kept: np.ndarray, end: int) -> None:
        """Copy the first kept[i] live columns of row rows[i] into the small cache's row i, at
        columns [end - kept[i], end)."""
        live = self.live[rows]                                          # (n, T_max)
        rank = np.cumsum(live, axis=1) - 1                              # (n, T_max)
        chosen = live & (rank < kept[:, None])
        pick_i, pick_col = np.nonzero(chosen)                           # (N,) each, row-major
        dest = end - kept[pick_i] + rank[pick_i, pick_col]              # (N,)
        source_rows = np.asarray(rows)[pick_i]
        for layer in range(len(small.k)):
            small.k[layer][pick_i, :, dest] = self.cache.k[layer][source_rows, :, pick_col]
            small.v[layer][pick_i, :, dest] = self.cache.v[layer][source_rows, :, pick_col]
        small_live[pick_i, dest] = True

    def place(self, small: KVCache, small_live: np.ndarray, source: np.ndarray, rows: list[int],
              ids: np.ndarray, lengths: np.ndarray, running: np.ndarray) -> None:
        """Copy small row source[i]'s live columns (small_live (n, W): joiner i's) into row
        rows[i], ending at column `length`; ids (N,) are the prompts one after the other, the
        ids of those columns in the same order."""
        if self.cache.length < int(lengths.max()):
            # the timeline grows to the longest prompt; nothing moves: the running rows' columns
            # stay, the new ones between are nobody's (not live, masked), so a 4,000-id joiner
            # costs no gather of every row's keys (`running` is kept for that older path)
            self.cache.length = int(lengths.max())
        for row in rows:
            self.forget(row)
        pick_i, pick_col = np.nonzero(small_live)                       # (N,) row-major
        rank = np.cumsum(small_live, axis=1)[pick_i, pick_col] - 1      # (N,)
        dest = self.cache.length - lengths[pick_i] + rank               # (N,)
        dest_rows = np.asarray(rows)[pick_i]
        from_rows = source[pick_i]
        for layer in range(len(small.k)):
            self.cache.k[layer][dest_rows, :, dest] = small.k[layer][from_rows, :, pick_col]
            self.cache.v[layer][dest_rows, :, dest] = small.v[layer][from_rows, :, pick_col]
        self.live[dest_rows, dest] = True
        self.ids[dest_rows, dest] = ids
        if isinstance(self.cache, HybridCache):                         # the rows' states
            self.cache.copy_states(np.asarray(rows), small, source)
