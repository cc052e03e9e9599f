"""The decoding state of a hybrid model: a recurrent state for each linear-attention layer beside
the KV cache of its full-attention layers (Qwen3-Next, Qwen3.5).

A Gated DeltaNet layer (blocks/gated_delta.py) keeps, per batch row, whatever the context:

    conv       (B, W-1, Dc)       the last W-1 inputs of its causal conv1d (its tail)
    recurrent  (B, Hv, Dk, Dv)    one (Dk, Dv) matrix per value head: the delta rule's state

so its bytes per row are fixed: `DeltaStateLayout.bytes_per_row`. A full-attention layer keeps
keys and values as every other family (blocks/kv_cache.py), which grow with the context.
`HybridCache` is a `KVCache` whose `k`/`v` lists hold the full-attention layers only (`slots`
maps a layer to its place there) and whose `states` hold the linear ones. The generate loop
uses it as any KVCache (`length`, `advance`, `with_room`, `select_rows`). `keep` cannot cut it
back, since a recurrent state cannot forget its last tokens: a chat that continues (the new
prompt extends everything cached) keeps it whole and prefills only the new turn; one that must
cut back (a regenerated reply) starts over from position 0, unless a `StateCheckpoint` taken at
that point (`checkpoint`, at a chat's turn boundary) is given back with `restore`: a copy of every
state (fixed bytes per row) and the KV length, since the full layers' keys before it are kept.

    layer:        0 linear   1 linear   2 linear   3 full     ...
    kept:         state      state      state      k, v (B, K, T_max, D)
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from glassformer.blocks.kv_cache import KVCache, KVLayout
from glassformer.errors import GlassformerError


@dataclass(frozen=True)
class DeltaStateLayout:
    """The widths of one linear-attention layer's state."""
    conv_dim: int       # Dc, the conv1d's channels
    conv_width: int     # W, its taps (W-1 inputs are kept)
    v_heads: int        # Hv
    k_head_dim: int     # Dk
    v_head_dim: int     # Dv

    def floats_per_row(self) -> int:
        """Numbers one batch row keeps in one layer, whatever the context."""
        return (self.conv_width - 1) * self.conv_dim + self.v_heads * self.k_head_dim * \
            self.v_head_dim


@dataclass
class LayerState:
    """One linear-attention layer's state for B rows (replaced in place by each forward)."""
    conv: np.ndarray        # (B, W-1, Dc)
    recurrent: np.ndarray   # (B, Hv, Dk, Dv)

    @classmethod
    def zeros(cls, layout: DeltaStateLayout, batch: int, dtype) -> "LayerState":
        return cls(conv=np.zeros((batch, layout.conv_width - 1, layout.conv_dim), dtype),
                   recurrent=np.zeros((batch, layout.v_heads, layout.k_head_dim,
                                       layout.v_head_dim), dtype))


@dataclass(frozen=True)
class StateCheckpoint:
    """A HybridCache as it was after its first `length` positions: copies of every linear
    layer's state; the full layers' keys and values before `length` stay in the cache itself
    (only positions from `length` on are ever written again after a restore)."""
    length: int
    states: dict             # linear layer -> LayerState (copies)

    def nbytes(self) -> int:
        """What keeping this checkpoint costs: the states' bytes, whatever `length` is."""
        return int(sum(s.conv.nbytes + s.recurrent.nbytes for s in self.states.values()))


@dataclass
class HybridCache(KVCache):
    """A KVCache over the full-attention layers (k, v in `slots` order) plus a LayerState per
    linear-attention layer (`states`, keyed by layer)."""
    slots: dict = field(default_factory=dict)       # full-attention layer -> index in k, v
    states: dict = field(default_factory=dict)      # linear layer -> LayerState
    kv_layout: KVLayout | None = None
    state_layout: DeltaStateLayout | None = None
    batch: int = 0
    capacity: int = 0                               # T_max (also with no full layer)

    @classmethod
    def allocate_hybrid(cls, kv_layout: KVLayout, state_layout: DeltaStateLayout,
                        layer_types: tuple[str, ...], *, batch: int, max_len: int,
                        dtype=np.float32) -> "HybridCache":
        """Zeroed keys/values for each "full_attention" layer, a zero state for each other."""
        full = [i for i, kind in enumerate(layer_types) if kind == "full_attention"]
        kv = KVCache.allocate(kv_layout, n_layer=len(full), batch=batch, max_len=max_len,
                              dtype=dtype)
        states = {i: LayerState.zeros(state_layout, batch, dtype)
                  for i, kind in enumerate(layer_types) if kind != "full_attention"}
        return cls(k=kv.k, v=kv.v, length=0, slots={layer: n for n, layer in enumerate(full)},
                   states=states, kv_layout=kv_layout, state_layout=state_layout, batch=batch,
                   capacity=max_len)

    @staticmethod
    def hybrid_bytes(kv_layout: KVLayout, state_layout: DeltaStateLayout,
                     layer_types: tuple[str, ...], *, rows: int, context: int,
                     dtype=np.float32) -> int:
        """Bytes `allocate_hybrid` would take: the full layers' KV cache (grows with context)
        plus the linear layers' states (do not)."""
        full = sum(kind == "full_attention" for kind in layer_types)
        kv = KVCache.bytes_for(kv_layout, layers=full, rows=rows, context=context, dtype=dtype)
        states = (len(layer_types) - full) * rows * state_layout.floats_per_row()
        return kv + int(states * np.dtype(dtype).itemsize)

    @property
    def layout(self) -> KVLayout:
        return self.kv_layout

    @property
    def rows(self) -> int:
        """B, also for a model with no full-attention layer (k and v are then empty)."""
        return self.batch

    @property
    def max_len(self) -> int:
        return self.capacity

    def write(self, layer: int, k: np.ndarray, v: np.ndarray):
        """KVCache.write for full-attention layer `layer` (its slot in k, v)."""
        return KVCache.write(self, self.slots[layer], k, v)

    def nbytes_per_token(self) -> int:
        """Bytes one more position costs (the full layers' keys and values only)."""
        return KVCache.bytes_for(self.kv_layout, layers=len(self.k), rows=1, context=1,
                                 dtype=self._dtype())

    def _dtype(self):
        any_state = next(iter(self.states.values()), None)
        return self.k[0].dtype if self.k else any_state.recurrent.dtype

    def nbytes(self) -> int:
        """Bytes this cache holds now: the full layers' keys and values and every state."""
        states = sum(s.conv.nbytes + s.recurrent.nbytes for s in self.states.values())
        return int(sum(a.nbytes for a in self.k + self.v)) + states

    def can_keep(self, length: int) -> bool:
        """Any length from 0 to `length` is accepted: all of it is kept, or less starts over."""
        return 0 <= length <= self.length

    def keep(self, length: int) -> None:
        """Keep every position (a continued chat: nothing to undo), or start over: a recurrent
        state cannot forget its last tokens, so a cache cut back to fewer positions is emptied
        (length 0, zero states) and the next forward prefills from the first token. A caller
        reads `length` afterwards to know which it got."""
        if not 0 <= length <= self.length:
            raise GlassformerError(f"cannot keep {length} positions of a cache holding "
                                   f"{self.length}")
        if length == self.length:
            return
        for state in self.states.values():
            state.conv[...] = 0.0
            state.recurrent[...] = 0.0
        self.length = 0

    def checkpoint(self) -> StateCheckpoint:
        """Copy the states now (the cache as it is after `length` positions): one copy per
        call, fixed bytes per row, whatever the context."""
        return StateCheckpoint(self.length, {
            i: LayerState(conv=s.conv.copy(), recurrent=s.recurrent.copy())
            for i, s in self.states.items()})

    def restore(self, checkpoint: StateCheckpoint) -> None:
        """Go back to `checkpoint` (taken from this cache, at most `length` positions ago): its
        states are copied in and `length` becomes its length. The caller makes sure no
        position before that was written again since (a checkpoint past a restored one is
        stale: the chat drops those)."""
        if not 0 <= checkpoint.length <= self.length or set(checkpoint.states) != set(
                self.states):
            raise GlassformerError(f"cannot restore a checkpoint of {checkpoint.length} "
                                   f"positions into a cache holding {self.length}")
        for i, state in self.states.items():
            state.conv[...] = checkpoint.states[i].conv
            state.recurrent[...] = checkpoint.states[i].recurrent
        self.length = checkpoint.length

    def with_room(self, max_len: int) -> "HybridCache":
        if max_len <= self.capacity:
            return self
        longer = KVCache.with_room(KVCache(k=self.k, v=self.v, length=self.length), max_len) \
            if self.k else KVCache(k=[], v=[], length=self.length)
        return HybridCache(k=longer.k, v=longer.v, length=self.length, slots=self.slots,
                           states=self.states, kv_layout=self.kv_layout,
                           state_layout=self.state_layout, batch=self.batch, capacity=max_len)

    def first_rows(self, rows: int) -> "HybridCache":
        """The first `rows` rows as views of this cache: what a forward writes there (keys,
        values, states) lands here (a server's step over the rows in use, serve/rows.py)."""
        states = {i: LayerState(conv=s.conv[:rows], recurrent=s.recurrent[:rows])
                  for i, s in self.states.items()}
        return HybridCache(k=[k[:rows] for k in self.k], v=[v[:rows] for v in self.v],
                           length=self.length, slots=self.slots, states=states,
                           kv_layout=self.kv_layout, state_layout=self.state_layout,
                           batch=rows, capacity=self.capacity)

    def copy_states(self, rows, source: "HybridCache", source_rows) -> None:
        """Rows `rows` (N,) of every state take source's rows `source_rows` (N,): a prompt
        prefilled in a cache of its own joins a server's row (its keys are copied by column,
        serve/rows.py; a state has no columns, it is the row's whole past)."""
        for i, state in self.states.items():
            state.conv[rows] = source.states[i].conv[source_rows]
            state.recurrent[rows] = source.states[i].recurrent[source_rows]

    def select_rows(self, rows: np.ndarray) -> "HybridCache":
        states = {i: LayerState(conv=s.conv[rows], recurrent=s.recurrent[rows])
                  for i, s in self.states.items()}
        return HybridCache(k=[k[rows] for k in self.k], v=[v[rows] for v in self.v],
                           length=self.length, slots=self.slots, states=states,
                           kv_layout=self.kv_layout, state_layout=self.state_layout,
                           batch=len(rows), capacity=self.capacity)
