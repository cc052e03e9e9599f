"""PrefillBudget: how many prompt ids one engine step feeds, sized to the running rows' pace.

A step that feeds a chunk of a joining prompt and then decodes the running rows makes each of
their streams wait for both. The streams keep their pace when the chunk costs at most
(ratio - 1) decode steps: with ratio 1.8 (the default) such a mixed step takes at most 1.8 decode
steps, so a stream's gap between two tokens while a prompt joins stays under twice its gap without
one (the 0.2 left is for the noise of a busy machine). A fixed chunk cannot promise that: the
same 64 ids cost a fraction of a decode step of 8 rows on one machine and three on another, and
more the further into a long prompt they are (their queries meet more keys).

The work of a chunk of c ids whose first one sits at column p of the joiners' cache, for u
joining rows, in units of one id's pass through the weights:

    work(c, p) = u * c * (1 + (p + (c + 1) / 2) / keys_per_id)

Each id meets every weight matrix once (the 1) and, on average, p + (c + 1) / 2 keys, each key
costing 1 / keys_per_id of that. `keys_per_id` is the model's shape, in multiply-adds: the
weights one id meets (the embedding and LM head left out: a chunk computes the logits of its
last column only) over n_layer x n_head x (key_dim + value_dim) for one query-key pair (scores
q.k and the weighted sum of values). SmolLM2-135M: about 3,100, so an id at position 4,000 costs
2.3x one at position 0.

The rest is measured, never assumed: seconds per unit of work is the median of the last WINDOW
chunks' seconds / work, and a decode step's seconds the median of the last WINDOW decode steps
(with their sampling). The next chunk is the largest c with

    work(c, p) * seconds_per_unit <= (ratio - 1) * decode_seconds

(a quadratic in c), within [1, ceiling]. Consecutive chunks sit at nearby positions, so the
measured rate takes in what the multiply-add count leaves out (softmax, masks, copies) and the
shape only has to carry it from one chunk's position to the next. Before any chunk is measured
the first one is PROBE ids; while no row decodes nobody's pace is at stake, and the chunk is
the ceiling (which bounds memory: a chunk's attention scores are c x (p + c) per head).
"""
from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np

RATIO = 1.8        # a mixed step (chunk + decode) costs at most this many decode steps
CEILING = 512      # ids per chunk at most (memory of the chunk's attention scores)
PROBE = 16         # the first chunk, before any has been measured
WINDOW = 8         # recent chunks / decode steps whose median is used


def keys_per_id(model) -> float:
    """How many query-key pairs cost as much as one id's pass through the weights (the model's
    shape in multiply-adds; see the module docstring)."""
    layout = model.kv_layout()
    cfg = model.cfg
    heads = getattr(cfg, "n_head", layout.heads)
    pair = cfg.n_layer * heads * (layout.key_dim + layout.value_dim)          # one q.k and p.v
    weights = sum(int(getattr(value, "size", 0)) for name, value in model.params.items()
                  if name not in ("tok_emb", "lm_head", "pos_emb"))
    return max(weights / pair, 1.0)


def chunk_work(rows: int, chunk: int, position: int, keys: float) -> float:
    """work(c, p): `rows` joiners feeding `chunk` ids from cache column `position`."""
    return rows * chunk * (1.0 + (position + (chunk + 1) / 2.0) / keys)


@dataclass
class PrefillBudget:
    """Chooses each step's chunk from the measured decode step and prefill rate."""
    keys: float                        # keys_per_id(model)
    ratio: float = RATIO
    ceiling: int = CEILING
    decode_seconds: deque = field(default_factory=lambda: deque(maxlen=WINDOW))
    unit_seconds: deque = field(default_factory=lambda: deque(maxlen=WINDOW))

    @classmethod
    def for_model(cls, model, ratio: float = RATIO, ceiling: int = CEILING) -> "PrefillBudget":
        return cls(keys_per_id(model), ratio, ceiling)

    def decoded(self, seconds: float) -> None:
        """A decode step of the running rows (and its sampling) took `seconds`."""
        self.decode_seconds.append(seconds)

    def fed(self, rows: int, chunk: int, position: int, seconds: float) -> None:
        """A chunk of `chunk` ids for `rows` joiners from column `position` took `seconds`."""
        self.unit_seconds.append(seconds / chunk_work(rows, chunk, position, self.keys))

    def chunk(self, rows: int, position: int, decoding: bool) -> int:
        """The ids the next step feeds: `rows` joiners, from cache column `position`, beside
        running rows that decode (`decoding`) or not."""
        if not decoding:
            return self.ceiling
        if not self.unit_seconds or not self.decode_seconds:
            return min(PROBE, self.ceiling)
        budget = (self.ratio - 1.0) * float(np.median(self.decode_seconds))   # seconds
        rate = float(np.median(self.unit_seconds))                            # seconds / unit
        # rows * rate * (c + c (p + 1/2) / keys + c^2 / (2 keys)) <= budget: a c^2 + b c - budget
        a = rows * rate / (2.0 * self.keys)
        b = rows * rate * (1.0 + (position + 0.5) / self.keys)
        largest = (-b + math.sqrt(b * b + 4.0 * a * budget)) / (2.0 * a)
        return int(min(max(math.floor(largest), 1), self.ceiling))
