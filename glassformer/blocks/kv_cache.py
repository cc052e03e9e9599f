"""KVCache: the keys and values of tokens already seen, kept for fast generation.

Generation state, not backward state (STYLE.md §4). Per layer, one preallocated array each for
keys and values, (B, K, T_max, D), plus `length`: how many positions are filled. The attention
block calls `write`, which puts the new tokens' keys and values at [length, length + T) and hands
back [0, length + T), every key and value so far (as mlx's `update_and_fetch`); it never changes
`length`, since every layer of one forward writes at the same positions. Only the generate loop
advances it, once per forward, with `advance`;
a chat that reuses the cache for its next turn cuts it back to the prefix it shares with the new
prompt, with `keep` (the positions past it are overwritten by the next forward), and lengthens it
with `with_room` when the turn needs more positions than it holds: a cache is sized by what is
asked of it (prompt + new tokens), never by the model's whole context.

Its widths are a `KVLayout` (heads, key_dim, value_dim), the one record every causal family's
`kv_layout(cfg)` returns; `allocate` takes it, and `bytes_for` says what a cache of it costs
before one is made (serve's memory budget asks it). DeepSeek's multi-head latent attention
(blocks/mla.py) keeps a latent cache in the same arrays: per layer `k` holds the normalised
latent (B, 1, T_max, R) and `v` the rotated RoPE key (B, 1, T_max, Dr), two widths
(KVLayout(heads=1, key_dim=R, value_dim=Dr)); keys and values are rebuilt from them at every
step.

    position:   0   1   2   3   4   5  ...  T_max-1
    layer l k:  k0  k1  k2  k3  .   .        .         length = 4
                 ^^^^ filled ^^^  ^^ the next forward writes here

A layer with a sliding window of W (Mistral, Gemma 3's local layers, gpt-oss's windowed ones) never
reads a key more than W - 1 positions back, so `allocate(..., windows=...)` gives it a ring of
min(W, T_max) slots instead of T_max: position p lives in slot p % W, and a new key overwrites
the one that slid out of every future window. Its bytes stay O(W) however long the context:

    W = 4, length = 6     slot:   0   1   2   3
                          key:    k4  k5  k2  k3       (k0, k1 overwritten)

`write` on a ring hands back the keys it still holds and the new ones in position order (a
copy: attention does not care about key order, but the end-aligned causal window mask of
ops/attention.py reads positions from it), so the attention block sees S = min(length, W) + T
keys and cuts its key mask to the last S columns. Cutting a ring back (`keep`) works only while
the positions the next token needs are still in it (`can_keep`).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from glassformer.errors import GlassformerError


@dataclass(frozen=True)
class KVLayout:
    """The widths of one layer's KV cache: k is (B, heads, T_max, key_dim) and v is
    (B, heads, T_max, value_dim).

    Multi-head and grouped attention: heads = K, key_dim = value_dim = D. MLA's latent cache:
    heads 1, key_dim R (the latent), value_dim Dr (the RoPE key).
    """
    heads: int       # K, the key/value heads kept (MLA: 1)
    key_dim: int     # D, the width of a cached key (MLA: R)
    value_dim: int   # the width of a cached value: D (MLA: Dr)

    def floats_per_token(self) -> int:
        """Numbers one position keeps in one layer, keys and values."""
        return self.heads * (self.key_dim + self.value_dim)


@dataclass
class KVCache:
    """Preallocated per-layer keys/values and the number of filled positions."""
    k: list[np.ndarray]   # n_layer arrays of (B, K, T_max, D) (MLA: (B, 1, T_max, R));
                          # a ring layer's are (B, K, W, D)
    v: list[np.ndarray]   # n_layer arrays of (B, K, T_max, D) (MLA: (B, 1, T_max, Dr))
    length: int = 0
    rings: tuple[bool, ...] = ()   # per layer: its arrays are a ring of W slots (() none is)
    positions: int | None = None   # T_max, when a ring makes it differ from k[0]'s length
    batch_invariant: bool = False  # serve --batch-invariant: a decoded step computes each row
                                   # apart from the others (models/common.py: layers_forward)
    prefill_rows: bool = False     # serve --batch-invariant's prefill: each row's new ids on
                                   # fixed-shape tiles, one column per position
                                   # (blocks/prefill_rows.py)
    decode_plan: object = field(default=None, repr=False, compare=False)
                                   # the decoded step's operands, gathered at its first step
                                   # (blocks/decode_plan.py); None until then

    @classmethod
    def allocate(cls, layout: KVLayout, *, n_layer: int, batch: int, max_len: int,
                 dtype=np.float32, windows: tuple[int | None, ...] = ()) -> "KVCache":
        """An empty cache of `layout`'s widths: n_layer pairs of zeroed arrays. windows: each
        layer's sliding window W or None; a windowed layer gets a ring of min(W, T_max) slots."""
        slots = ring_slots(windows, n_layer, max_len)
        k = [np.zeros((batch, layout.heads, n, layout.key_dim), dtype)      # (B, K, T_max, D)
             for n in slots]
        v = [np.zeros((batch, layout.heads, n, layout.value_dim), dtype) for n in slots]
        rings = tuple(n < max_len for n in slots) if windows else ()
        return cls(k=k, v=v, length=0, rings=rings if any(rings) else (),
                   positions=max_len if any(rings) else None)

    @staticmethod
    def bytes_for(layout: KVLayout, *, layers: int, rows: int, context: int,
                  dtype=np.float32, windows: tuple[int | None, ...] = ()) -> int:
        """Bytes `allocate(layout, n_layer=layers, batch=rows, max_len=context, dtype=dtype,
        windows=windows)` would take, without allocating them (a budget asks this first)."""
        slots = sum(ring_slots(windows, layers, context))
        floats = rows * slots * layout.floats_per_token()
        return int(floats * np.dtype(dtype).itemsize)

    @property
    def layout(self) -> KVLayout:
        """The widths of this cache's arrays."""
        return KVLayout(heads=self.k[0].shape[1], key_dim=self.k[0].shape[3],
                        value_dim=self.v[0].shape[3])

    def nbytes_per_token(self) -> int:
        """Bytes one more position costs, over every layer and batch row: the memory a cache
        saves or spends per token."""
        return self.bytes_for(self.layout, layers=len(self.k), rows=1, context=1,
                              dtype=self.k[0].dtype)

    def nbytes(self) -> int:
        """Bytes this cache's arrays hold now (flat past the window for ring layers)."""
        return int(sum(a.nbytes for a in self.k + self.v))

    def is_ring(self, layer: int) -> bool:
        return bool(self.rings) and self.rings[layer]

    @property
    def rows(self) -> int:
        """B, the batch rows this cache holds."""
        return self.k[0].shape[0]

    @property
    def max_len(self) -> int:
        return self.k[0].shape[2] if self.positions is None else self.positions

    def check_room(self, new_tokens: int) -> None:
        """Raise before a forward that would write past T_max."""
        if self.length + new_tokens > self.max_len:
            raise GlassformerError(
                f"KV cache full: {self.length} positions filled + {new_tokens} new > "
                f"T_max={self.max_len}")

    def write(self, layer: int, k: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Store this step's keys and values of `layer`, k and v (B, K, T, D), at positions
        [length, length + T); return every key and value so far, (B, K, length + T, D) each
        (views of the cache, not copies). `length` stays where it is (see the module docstring).
        """
        t = k.shape[2]
        self.check_room(t)
        if self.is_ring(layer):
            return self._write_ring(layer, k, v)
        end = self.length + t
        self.k[layer][:, :, self.length:end] = k
        self.v[layer][:, :, self.length:end] = v
        return self.k[layer][:, :, :end], self.v[layer][:, :, :end]

    def _write_ring(self, layer: int, k: np.ndarray, v: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray]:
        """`write` for a ring layer: returns the held keys (positions [start, length)) and the
        new ones, in position order, (B, K, length - start + T, D) each (fresh arrays); then
        keeps the newest `slots` of them in their slots p % slots."""
        slots, t, length = self.k[layer].shape[2], k.shape[2], self.length
        held = np.arange(max(0, length - slots), length) % slots            # (n_held,) slots
        keys = np.concatenate([self.k[layer][:, :, held], k], axis=2)       # (B, K, S, D)
        values = np.concatenate([self.v[layer][:, :, held], v], axis=2)
        kept = np.arange(max(length, length + t - slots), length + t)       # newest positions
        self.k[layer][:, :, kept % slots] = k[:, :, kept - length]
        self.v[layer][:, :, kept % slots] = v[:, :, kept - length]
        return keys, values

    def advance(self, new_tokens: int) -> None:
        """Mark `new_tokens` more positions as filled (called by the generate loop only)."""
        self.check_room(new_tokens)
        self.length += new_tokens

    def can_keep(self, length: int) -> bool:
        """Whether `keep(length)` leaves every key the next token needs: always for plain
        layers; for a ring of n slots, only while positions [length - n + 1, length) were not
        overwritten by the positions being forgotten (length >= self.length - 1, or length 0)."""
        if not 0 <= length <= self.length:
            return False
        if length == 0 or not self.rings:
            return True
        smallest = min(a.shape[2] for a, ring in zip(self.k, self.rings) if ring)
        return self.length - length <= 1 or self.length <= smallest

    def keep(self, length: int) -> None:
        """Forget every position from `length` on (0 <= length <= self.length; a ring only as
        far back as `can_keep` allows)."""
        if not self.can_keep(length):
            raise GlassformerError(f"cannot keep {length} positions of a KV cache holding "
                                   f"{self.length} (a sliding-window ring no longer holds the "
                                   f"keys before them)")
        self.length = int(length)

    def with_room(self, max_len: int) -> "KVCache":
        """This cache when it holds `max_len` positions already, else a longer one holding the
        same filled positions (a chat's next, longer turn: the cache grows with use).

        Widths, batch, dtype and `length` are kept; only T_max grows.
        """
        if max_len <= self.max_len:
            return self
        # a ring keeps its slots (and its keys) as they are; plain layers grow
        windows = tuple(k.shape[2] if self.is_ring(i) else None for i, k in enumerate(self.k))
        longer = KVCache.allocate(self.layout, n_layer=len(self.k), batch=self.k[0].shape[0],
                                  max_len=max_len, dtype=self.k[0].dtype,
                                  windows=windows if self.rings else ())
        for i, ring in enumerate(self.rings):
            if ring:
                longer.k[i], longer.v[i] = self.k[i], self.v[i]
        for old, new in zip(self.k + self.v, longer.k + longer.v):
            if old is new:
                continue
            new[:, :, :self.length] = old[:, :, :self.length]   # (B, K, length, D) copied
        longer.length = self.length
        return longer

    def select_rows(self, rows: np.ndarray) -> "KVCache":
        """A cache holding rows `rows` (N,) of this one (repeats allowed): fresh arrays, the same
        length (beam search: one row per beam, gathered from its parent)."""
        return KVCache(k=[k[rows] for k in self.k], v=[v[rows] for v in self.v],
                       length=self.length, rings=self.rings,
                       positions=self.positions)                      # (N, K, T_max, D) each


def ring_slots(windows: tuple[int | None, ...], n_layer: int, max_len: int) -> list[int]:
    """Positions each layer's arrays hold: min(W, T_max) for a layer with window W, T_max for
    one without (windows empty: none has one)."""
    if not windows:
        return [max_len] * n_layer
    if len(windows) != n_layer:
        raise GlassformerError(f"expected one window per layer ({n_layer}), got {len(windows)}")
    return [max_len if w is None else min(int(w), max_len) for w in windows]
