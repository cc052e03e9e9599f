"""The toy numbers of the seed tutorial (§1.2): 3 tokens, d_model=4, one head of width 2.

These are facts taken from the tutorial so learners can check our walkthrough against it.
X is (B=1, T=3, C=4); Wq, Wk, Wv are (C=4, D=2).
"""
from __future__ import annotations

import numpy as np


def seed_inputs() -> dict[str, np.ndarray]:
    """Fresh float32 copies of the seed's X, Wq, Wk, Wv."""
    x = np.array([[[0.1, 0.2, 0.3, 0.4],     # token 0
                   [0.5, 0.4, 0.3, 0.2],     # token 1
                   [0.0, 0.1, 0.0, 0.1]]],   # token 2
                 dtype=np.float32)           # (B=1, T=3, C=4)
    wq = np.array([[0.2, -0.1], [0.0, 0.1], [0.1, 0.2], [-0.1, 0.0]], dtype=np.float32)
    wk = np.array([[0.1, 0.1], [0.0, -0.1], [0.2, 0.0], [0.0, 0.2]], dtype=np.float32)
    wv = np.array([[0.1, 0.0], [-0.1, 0.1], [0.2, -0.1], [0.0, 0.2]], dtype=np.float32)
    return {"X": x, "Wq": wq, "Wk": wk, "Wv": wv}


def random_inputs(rng: np.random.Generator, *, batch: int, seq: int, d_model: int,
                  d_k: int) -> dict[str, np.ndarray]:
    """Random float32 X (B, T, C) ~ N(0, 1) and W (C, D) ~ N(0, 1/C), so Q, K stay O(1)."""
    w_std = 1.0 / float(np.sqrt(d_model))
    x = rng.standard_normal((batch, seq, d_model)).astype(np.float32)
    weights = {name: (rng.standard_normal((d_model, d_k)) * w_std).astype(np.float32)
               for name in ("Wq", "Wk", "Wv")}
    return {"X": x, **weights}
