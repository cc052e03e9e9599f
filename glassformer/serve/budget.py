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

A chunk is its own forward, so it also pays a fixed cost whatever its size: every weight is
read once more from memory (a decode step of a few rows is mostly that reading). Its seconds are

    seconds(c, p) = fixed + rate * work(c, p)

and both are measured, never assumed: a least-squares line through the last WINDOW chunks'
(work, seconds), once their works spread by SPREAD x or more (the first two chunks of a join
are PROBE / 4 and PROBE ids, so they do); until then, and whenever the line is not a sensible
one (a negative fixed cost or rate), the last sensible `fixed` is kept (0 at first) and the
rate is the median of (seconds - fixed) / work. A decode step's seconds are the median of the
last WINDOW decode steps (with their sampling). The next chunk is the largest c with

    fixed + rate * work(c, p) <= (ratio - 1) * decode_seconds

(a quadratic in c), within [1, ceiling]. Consecutive chunks sit at nearby positions, so the
measured rate takes in what the multiply-add count leaves out (softmax, masks, copies) and the
shape only has to carry it from one chunk's position to the next. Where even one id's chunk
costs more than the budget (the fixed cost alone past ratio - 1 decode steps), the chunk is one
id: the streams' pace comes first, and the joiner waits. Before anything is measured the chunk
is PROBE ids; while no row decodes nobody's pace is at stake, and the chunk is the ceiling (which
bounds memory: a chunk's attention scores are c x (p + c) per head).

In a mixed step (serve/mixed.py: the chunk's ids inside the decode step's forward) the step's
seconds are decode + rate * work(c, p): the chunk reads no weight on its own, so it has no fixed
cost, and what it took is the mixed step's seconds less the decode step's median (`fed_beside`).
No fixed cost is fitted then (a line's intercept through such noisy points was once positive
enough to leave no budget: one id a step for a whole join), and the rate is the ratio of the sums
(the largest chunks weigh most) rather than the median of ratios. That difference of two noisy
times can read as free for a small chunk, so a mixed chunk grows at most GROWTH x the largest of
the last WINDOW per step, or by one id when that is more: a ramp, not a jump to the ceiling, that
can climb back from one id. The second probe too: 4 then 6 ids, not 16, since on a GGUF-block
model each id of a mixed step costs about 1 / B of a decode step of B rows (the compiled product's
cost grows with its rows), and 16 would cost 3 steps at once.
"""
from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np

RATIO = 1.8        # a mixed step (chunk + decode) costs at most this many decode steps
CEILING = 512      # ids per chunk at most (memory of the chunk's attention scores)
PROBE = 16         # the second chunk of a join (the first: PROBE // 4), before a line is fitted
WINDOW = 8         # recent chunks / decode steps measured
SPREAD = 2.0       # a line is fitted through chunks whose works differ this much or more
GROWTH = 1.5       # a mixed step's chunk is at most this times the largest of the last WINDOW


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
    """Chooses each step's chunk from the measured decode step and chunk costs."""
    keys: float                        # keys_per_id(model)
    ratio: float = RATIO
    ceiling: int = CEILING
    decode_seconds: deque = field(default_factory=lambda: deque(maxlen=WINDOW))
    chunks: deque = field(default_factory=lambda: deque(maxlen=WINDOW))   # (work, seconds)
    fixed: float = 0.0                 # seconds a chunk costs whatever its size (last fit)
    beside: deque = field(default_factory=lambda: deque(maxlen=WINDOW))   # mixed steps' chunks

    @classmethod
    def for_model(cls, model, ratio: float = RATIO, ceiling: int = CEILING) -> "PrefillBudget":
        return cls(keys_per_id(model), ratio, ceiling)

    def decoded(self, seconds: float) -> None:
        """A decode step of the running rows (and its sampling) took `seconds`."""
        self.decode_seconds.append(seconds)

    def fed(self, rows: int, chunk: int, position: int, seconds: float) -> None:
        """A chunk of `chunk` ids for `rows` joiners from column `position` took `seconds`."""
        self.chunks.append((chunk_work(rows, chunk, position, self.keys), seconds))

    def fed_beside(self, rows: int, chunk: int, position: int, seconds: float) -> None:
        """A mixed step (serve/mixed.py: the chunk inside the decode step) took `seconds`: the
        chunk's share is what it took beyond the measured decode step."""
        decode = float(np.median(self.decode_seconds)) if self.decode_seconds else 0.0
        self.fed(rows, chunk, position, seconds - decode)
        self.beside.append(chunk)

    def cost(self) -> tuple[float, float]:
        """(fixed seconds, seconds per unit of work) from the chunks measured."""
        work, seconds = np.array(self.chunks).T                       # (n,) each
        if self.beside:   # mixed steps: no fixed cost by construction; the rate alone, as the
            # ratio of sums (the largest chunks weigh most: small ones are mostly noise)
            return 0.0, max(float(np.maximum(seconds, 0.0).sum() / work.sum()), 1e-12)
        if work.max() >= SPREAD * work.min():
            rate, fixed = np.polyfit(work, seconds, 1)                 # seconds = fixed + rate w
            if rate > 0 and fixed >= 0:
                self.fixed = float(fixed)
        rate = float(np.median(np.maximum(seconds - self.fixed, 0.0) / work))
        return self.fixed, max(rate, 1e-12)

    def chunk(self, rows: int, position: int, decoding: bool) -> int:
        """The ids the next step feeds: `rows` joiners, from cache column `position`, beside
        running rows that decode (`decoding`) or not."""
        if not decoding:
            return self.ceiling
        largest = self.fitting(rows, position)
        if self.beside:   # mixed steps: at most GROWTH x the largest chunk measured (a ramp)
            largest = min(largest, max(GROWTH * max(self.beside), max(self.beside) + 1))
        return int(min(max(math.floor(largest), 1), self.ceiling))

    def fitting(self, rows: int, position: int) -> float:
        """The largest chunk the measured costs allow (the probes until two are measured)."""
        if not self.decode_seconds or len(self.chunks) < 2:
            return PROBE // 4 if not self.chunks else PROBE
        fixed, rate = self.cost()
        budget = (self.ratio - 1.0) * float(np.median(self.decode_seconds)) - fixed   # seconds
        if budget <= 0:
            return 1
        # rows * rate * (c + c (p + 1/2) / keys + c^2 / (2 keys)) <= budget: a c^2 + b c - budget
        a = rows * rate / (2.0 * self.keys)
        b = rows * rate * (1.0 + (position + 0.5) / self.keys)
        return (-b + math.sqrt(b * b + 4.0 * a * budget)) / (2.0 * a)
