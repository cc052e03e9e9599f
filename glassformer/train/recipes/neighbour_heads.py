"""Neighbour heads: the Tang BERT recipe's init, a BERT whose first layer starts out reading each
token's neighbours (train/recipes/__init__.py calls it after the family's init_params).

Why. A masked-LM sees [MASK] where the answer was, so everything it predicts there must come
through attention, and at the usual init (every weight Normal(0, 0.02)) attention is uniform:
the left and right neighbours, which say the most about a missing character, each get 1/T of it.
Early in training the model is still fitting the unigram, and a signal that varies with the
context only adds noise to that fit, so the gradient spreads attention out and shrinks it; the
model sits on the unigram for thousands of steps (docs/bert.md). Here layer 0's heads start
looking at fixed offsets (-1, +1, -2, +2, -3, ...), one offset per head, and carry the token
there back to the query's position; the run's TrainConfig then holds the weights that point the
heads (`HELD_KEYS`, recorded as TrainConfig.held_keys) still for the first hold_iters
iterations, while the rest of the model learns to use what they bring. After that everything
trains: it is an ordinary BERT, and it exports as one.

How (C = d_model, H heads of size d = C / H, M = d // 2 frequencies theta_1..theta_M):

    pos_emb[p]  = a * [cos(theta_m p), sin(theta_m p)]   in the last 2M dims, 0 elsewhere
                  (tok_emb is 0 in those dims at first)
    head h, offset delta_h: W_q maps the code at p to the code at p + delta_h (each (cos, sin)
                  pair turned by theta_m delta_h), W_k reads the code as it is, so

    q_i . k_j  ~  K(i + delta_h - j),   K(x) = sum_m cos(theta_m x),   K(0) = M

one sharp peak at j = i + delta_h, if K stays low at every other x the table can hold
(1 <= |x| <= T - 1, where the neighbour is in the table). When 2M + 1 >= T the frequencies are
the uniform grid theta_m = 2 pi m / (2M + 1): K is a Dirichlet kernel, -1/2 at every other x of the table, the
best there is. A longer table would alias that grid (K has period 2M + 1, so a second peak of M
sits 2M + 1 positions away), so there the frequencies are the best of `DRAWS` uniform draws in
(0.05, pi) from a fixed seed (`frequencies`: the draw whose largest K over the table is least;
for M = 16 at T = 128, 0.28 M): non-uniform frequencies keep one peak over a long range. The
heads fit when that largest sidelobe is at most `MAX_SIDELOBE` M (and there are two heads or
more). W_q, W_k are scaled so that the score gap between the peak and the largest sidelobe is
`GAP` (the head puts most of its weight on its neighbour). W_v takes the token part (the first
C - 2M dims) through an orthonormal (C - 2M, d) map Q_h, W_o = Q_h^T writes it back there.
Everything else keeps BERT's Normal(0, 0.02) init. `a` makes the code's energy equal to the
token embeddings'. The init is deterministic: the search draws from its own fixed seed, never
from the run's generator.

When the heads do not fit (a head too small to keep one peak over the table, or one head), the
recipe starts the position table from Vaswani et al.'s sinusoids instead (`sinusoid_positions`),
and says so.

Old run folders. Before the recipe owned this init, BertConfig carried it as two flags,
`neighbour_heads` and `sinusoid_init` (config.json has them): BertConfig.from_dict ignores them
(they only chose the init, which a saved run is past), and `with_old_held_keys` reads the first
once, on resume, as the held_keys it meant.
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from glassformer.errors import GlassformerError
from glassformer.ops.position import sinusoidal_positions

GAP = 10.0                  # score of the head's neighbour minus the highest other one, at init
EMB_STD = 0.02              # BERT's init of the embedding tables (models/bert.py)
MAX_SIDELOBE = 0.5          # the most K may reach off its peak, as a share of the peak M
DRAWS, SEARCH_SEED = 3000, 0   # the frequency search: how many draws, from which fixed seed
SEARCH_CHUNK = 100             # draws scored at once (bounds the search's memory)


def offsets(n_head: int) -> list[int]:
    """The offset each head of layer 0 starts on: -1, +1, -2, +2, -3, ..."""
    return [(h // 2 + 1) * (-1 if h % 2 == 0 else 1) for h in range(n_head)]


def frequencies(M: int, reach: int) -> tuple[np.ndarray, float]:
    """(theta (M,), the largest K(x) = sum_m cos(theta_m x) over 1 <= x <= reach): the uniform
    grid 2 pi m / (2M + 1) where it does not alias (2M + 1 > reach: K = -1/2 there), else the
    best of DRAWS seeded draws in (0.05, pi). Deterministic: its own fixed seed.

    note: the draws are scored SEARCH_CHUNK at a time, so the (draws, M, reach) cosines never
    exceed SEARCH_CHUNK * M * reach floats, whatever the context."""
    if 2 * M + 1 > reach:
        return 2.0 * math.pi * np.arange(1, M + 1) / (2 * M + 1), -0.5
    draws = np.random.default_rng(SEARCH_SEED).uniform(0.05, math.pi, (DRAWS, M))  # (D, M)
    x = np.arange(1, reach + 1)                                                     # (X,)
    sidelobes = np.concatenate([
        np.cos(chunk[:, :, None] * x).sum(1).max(1)               # (n, M, X) -> (n,)
        for chunk in np.split(draws, range(SEARCH_CHUNK, DRAWS, SEARCH_CHUNK))])    # (D,)
    best = int(sidelobes.argmin())
    return np.sort(draws[best]), float(sidelobes[best])


def check_neighbour_heads(d_model: int, n_head: int, max_seq_len: int) -> None:
    """The position code must keep one peak over the table, and leave a head for the tokens."""
    if n_head < 2 or 2 * ((d_model // n_head) // 2) >= d_model:
        raise GlassformerError(f"neighbour_heads needs more than one head (the position code "
                               f"takes one head's dims, the tokens the rest): got n_head {n_head}")
    d = d_model // n_head
    M = d // 2
    share = frequencies(M, max_seq_len - 1)[1] / M if M else 1.0   # largest sidelobe / peak
    if share > MAX_SIDELOBE:
        raise GlassformerError(f"neighbour_heads needs a head large enough to point at one "
                               f"position of {max_seq_len} (its position code has one frequency "
                               f"per two dims, and off its peak may reach at most "
                               f"{MAX_SIDELOBE:.0%} of it): head size {d} reaches {share:.0%}")


# What the run holds still for hold_iters: the weights that point layer 0's heads
HELD_KEYS = ("pos_emb", "blocks.0.attn.wq", "blocks.0.attn.bq", "blocks.0.attn.wk",
             "blocks.0.attn.bk")


def fits_neighbour_heads(d_model: int, n_head: int, block_size: int) -> bool:
    """Whether a new BERT of this shape can start with neighbour heads (check_neighbour_heads)."""
    try:
        check_neighbour_heads(d_model, n_head, block_size)
    except GlassformerError:
        return False
    return True


def with_old_held_keys(train_cfg, old_model_config: dict):
    """A resumed run's TrainConfig: a run saved before TrainConfig.held_keys existed, whose
    config.json says neighbour_heads, held HELD_KEYS (the flag is read here, once)."""
    if train_cfg.held_keys or not old_model_config.get("neighbour_heads", False):
        return train_cfg
    return dataclasses.replace(train_cfg, held_keys=",".join(HELD_KEYS))


def sinusoid_positions(params: dict, cfg, rng: np.random.Generator | None = None) -> dict:
    """The position table of a fresh BERT from the [sin, cos] table (still learned), at the
    init's scale: sin and cos entries have std 1/sqrt(2), so the table is scaled by
    EMB_STD * sqrt(2) (neighbouring positions start similar). Draws nothing."""
    table = sinusoidal_positions(cfg.max_seq_len, cfg.d_model, dtype=np.float32)  # (T_max, C)
    params["pos_emb"] = (table * (EMB_STD * math.sqrt(2.0))).astype(np.float32)
    return params


def neighbour_heads_init(params: dict, cfg, rng: np.random.Generator) -> dict:
    """Rewrite a fresh BERT's embeddings and layer-0 attention as the module docstring says.

    params: BERT params from init_params (float32), changed in place and returned.
    """
    C, H, T = cfg.d_model, cfg.n_head, cfg.max_seq_len
    check_neighbour_heads(C, H, T)
    d = C // H
    M = d // 2
    k = 2 * M                                                  # dims of the position code
    tok, pos = slice(0, C - k), slice(C - k, C)
    theta, sidelobe = frequencies(M, T - 1)                      # (M,), K's largest off-peak
    angle = np.arange(T)[:, None] * theta[None, :]             # (T, M)
    code = np.concatenate([np.cos(angle), np.sin(angle)], 1)   # (T, k), entries in [-1, 1]
    amplitude = EMB_STD * math.sqrt(2.0 * (C - k) / k)         # code energy = token energy
    params["tok_emb"][:, pos] = 0.0
    table = np.zeros((T, C))
    table[:, pos] = amplitude * code
    params["pos_emb"] = table.astype(np.float32)
    # After the embedding LayerNorm the code's entries are ~ sqrt(C / k) * code: W_q, W_k
    # divide that out and scale so that q . k / sqrt(d) is GAP above the largest sidelobe at
    # the peak (for the uniform grid, M - (-1/2): the scale it always had).
    after_norm = math.sqrt(C / k)
    scale = math.sqrt(GAP * math.sqrt(d) / (M - sidelobe)) / after_norm
    wq, wk = params["blocks.0.attn.wq"], params["blocks.0.attn.wk"]
    wv, wo = params["blocks.0.attn.wv"], params["blocks.0.attn.wo"]
    for h, delta in enumerate(offsets(H)):
        cols = slice(h * d, (h + 1) * d)
        code_cols = slice(h * d, h * d + k)     # all of the head's dims when d is even
        c, s = np.cos(theta * delta), np.sin(theta * delta)
        turn = np.block([[np.diag(c), -np.diag(s)], [np.diag(s), np.diag(c)]])   # (k, k)
        wq[pos, code_cols] = scale * turn.T     # row code(i) @ turn.T = code(i + delta)
        wk[pos, code_cols] = scale * np.eye(k)
        q_h, _ = np.linalg.qr(rng.standard_normal((C - k, d)))   # (C - k, d), orthonormal
        wv[:, cols] = 0.0
        wv[tok, cols] = q_h
        wo[cols, :] = 0.0
        wo[cols, tok] = q_h.T
    return params
