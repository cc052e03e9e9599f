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
"""
from __future__ import annotations

from dataclasses import dataclass

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
    k: list[np.ndarray]   # n_layer arrays of (B, K, T_max, D) (MLA: (B, 1, T_max, R))
    v: list[np.ndarray]   # n_layer arrays of (B, K, T_max, D) (MLA: (B, 1, T_max, Dr))
    length: int = 0

    @classmethod
    def allocate(cls, layout: KVLayout, *, n_layer: int, batch: int, max_len: int,
                 dtype=np.float32) -> "KVCache":
        """An empty cache of `layout`'s widths: n_layer pairs of zeroed arrays."""
        k_shape = (batch, layout.heads, max_len, layout.key_dim)    # (B, K, T_max, D)
        v_shape = (batch, layout.heads, max_len, layout.value_dim)  # (B, K, T_max, D)
        return cls(k=[np.zeros(k_shape, dtype) for _ in range(n_layer)],
                   v=[np.zeros(v_shape, dtype) for _ in range(n_layer)], length=0)

    @staticmethod
    def bytes_for(layout: KVLayout, *, layers: int, rows: int, context: int,
                  dtype=np.float32) -> int:
        """Bytes `allocate(layout, n_layer=layers, batch=rows, max_len=context, dtype=dtype)`
        would take, without allocating them (a budget asks this first)."""
        floats = layers * rows * context * layout.floats_per_token()
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

    @property
    def max_len(self) -> int:
        return self.k[0].shape[2]

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
        end = self.length + t
        self.k[layer][:, :, self.length:end] = k
        self.v[layer][:, :, self.length:end] = v
        return self.k[layer][:, :, :end], self.v[layer][:, :, :end]

    def advance(self, new_tokens: int) -> None:
        """Mark `new_tokens` more positions as filled (called by the generate loop only)."""
        self.check_room(new_tokens)
        self.length += new_tokens

    def keep(self, length: int) -> None:
        """Forget every position from `length` on (0 <= length <= self.length)."""
        if not 0 <= length <= self.length:
            raise GlassformerError(f"cannot keep {length} positions of a KV cache holding "
                                   f"{self.length}")
        self.length = int(length)

    def with_room(self, max_len: int) -> "KVCache":
        """This cache when it holds `max_len` positions already, else a longer one holding the
        same filled positions (a chat's next, longer turn: the cache grows with use).

        Widths, batch, dtype and `length` are kept; only T_max grows.
        """
        if max_len <= self.max_len:
            return self
        longer = KVCache.allocate(self.layout, n_layer=len(self.k), batch=self.k[0].shape[0],
                                  max_len=max_len, dtype=self.k[0].dtype)
        for old, new in zip(self.k + self.v, longer.k + longer.v):
            new[:, :, :self.length] = old[:, :, :self.length]   # (B, K, length, D) copied
        longer.length = self.length
        return longer

    def select_rows(self, rows: np.ndarray) -> "KVCache":
        """A cache holding rows `rows` (N,) of this one (repeats allowed): fresh arrays, the same
        length (beam search: one row per beam, gathered from its parent)."""
        return KVCache(k=[k[rows] for k in self.k], v=[v[rows] for v in self.v],
                       length=self.length)                            # (N, K, T_max, D) each
