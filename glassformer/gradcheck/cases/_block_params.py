"""Shared helpers for the block gradcheck cases: float64 params that exercise every gradient.

A freshly initialised block has norm scales of exactly 1 and biases of exactly 0, and small
(0.02) weights that keep every nonlinearity in its linear region. A gradcheck from there would
pass a backward that, say, forgot to multiply by the norm scale. So the cases draw O(1) weights
and move every norm scale away from 1 and every bias away from 0.

The cases put each parameter in the gradcheck inputs under its block-local name ("attn.wq",
"norm1.w", "mlp.w_up") next to x (and memory), so that every one of them is checked; the names go
on and off with blocks/names.py's `prefixed` and `sub_params`, as in the models.
"""
from __future__ import annotations

import numpy as np

from glassformer.blocks.names import prefixed

# Weight std for the cases: large enough that softmax, GELU and the norms are clearly nonlinear,
# small enough that the attention weights do not saturate to one-hot rows.
WEIGHT_STD = 0.5
# How far norm scales move from 1 and biases from 0.
SHIFT_STD = 0.3
# Left padding, as a batched prompt has it: row 1's first token is padding, so its real tokens
# sit at positions 0, 1 (the pad repeats position 0), and its first query sees no real key.
LEFT_PAD_MASK = np.array([[True, True, True], [False, True, True]])      # (B, T)
LEFT_PAD_POSITIONS = np.array([[0, 1, 2], [0, 0, 1]])                   # (B, T)


def exercised(params: dict, rng: np.random.Generator) -> dict:
    """Cast to float64; scales of norms ("...norm*.w") ~ 1 + noise, biases ("b...") ~ noise."""
    out = {}
    for name, value in params.items():
        value = np.asarray(value, dtype=np.float64)
        leaf = name.rsplit(".", 1)[-1]
        if leaf.startswith("b"):                    # bq, bk, bv, bo, b_up, b_down, norm*.b
            value = value + SHIFT_STD * rng.standard_normal(value.shape)
        elif leaf == "w" and "norm" in name:        # norm1.w, norm2.w, norm_cross.w
            value = value + SHIFT_STD * rng.standard_normal(value.shape)
        elif leaf.endswith("_norm"):                # QK-norm's attn.q_norm, attn.k_norm
            value = value + SHIFT_STD * rng.standard_normal(value.shape)
        elif leaf == "sinks":                       # attention sinks (H,), 0 at init
            value = value + rng.standard_normal(value.shape)
        out[name] = value
    return out


def attention_inputs(params: dict, prefix: str, rng: np.random.Generator, x: np.ndarray, *,
                     memory: np.ndarray | None = None, mask: np.ndarray | None = None,
                     positions: np.ndarray | None = None) -> dict:
    """An attention case's inputs: x (B, T, C), then memory (B, S, C), the key mask and the
    positions where given, then the block's params under their block-local names (`prefix`),
    exercised with rng."""
    inputs = {"x": x}
    given = {"memory": memory, "key_mask": mask, "positions": positions}
    inputs.update({name: value for name, value in given.items() if value is not None})
    inputs.update(exercised(prefixed(params, prefix), rng))
    return inputs


def key_mask(lengths: list[int], s: int) -> np.ndarray:
    """(B, S) bool, True for the first lengths[b] keys of row b (right padding)."""
    return np.arange(s)[None, :] < np.asarray(lengths)[:, None]   # (1, S) vs (B, 1) -> (B, S)


def drop_key_bias(grads: dict, keep: bool) -> dict:
    """Without RoPE the key bias has an exactly zero gradient, so leave it out of the check.

    note: q . (k + bk) = q . k + q . bk, and q . bk is the same for every key of a query row;
    softmax ignores a constant added to a row, so d loss / d bk = 0 exactly. Central differences
    of a function that does not change give rounding noise, and a relative error of noise over
    noise is ~1, which says nothing. With RoPE each key is turned by its own angle, bk stops being
    a constant shift, and the RoPE cases check it. tests/blocks checks dbk ~ 0 in absolute terms.
    """
    if keep:
        return grads
    return {name: g for name, g in grads.items() if not name.endswith("bk")}
