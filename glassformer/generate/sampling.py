"""Choosing the next token from logits: one sampler for generate(), chat and serve.

A `Sampling` is how one row chooses, held as a value (mlx-lm's make_sampler idea): generate()
and chat hold one for every row of their batch, each server request holds its own. `sample`
applies a batch of them, one per row, to a batch of logits (B, V) in one call:

    greedy       temperature == 0: the argmax (ties go to the lowest id)
    temperature  divide logits by T: T < 1 sharpens, T > 1 flattens
    top-k        keep the k largest logits (ties at the k-th value are all kept)
    top-p        keep the smallest set of most likely tokens whose probability sums to >= p
                 (the most likely token is always kept), as HF's TopPLogitsWarper; sorting
                 only each row's largest few (nucleus.py), not all V
    min-p        keep the tokens at least min_p times as likely as the most likely one, as
                 HF's MinPLogitsWarper (after temperature: a cut on logit >= max + log(min_p))

Before all of these, logit_bias and the repetition, frequency and presence penalties
(penalties.py), which read what each row has seen (`history`), greedy rows included.

Filters apply in the order temperature, top-k, top-p, min-p, then one draw from the remaining
distribution: one uniform per sampled row from that row's np.random.Generator (generate() gives
all its rows one generator, a server each request its own), so a seed reproduces the choice and
a row picks in a batch what it picks alone. A filter is vectorised over rows: a row that does
not use it has a value that keeps every token (top_k 0, top_p 1).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from glassformer.errors import GlassformerError
from glassformer.generate.draw import draw
from glassformer.generate.nucleus import top_p_filter  # noqa: F401  (sample's, tests')
from glassformer.generate.penalties import penalize


def check_sampling(temperature: float, top_k: int | None, top_p: float | None) -> None:
    """Clear errors for settings that have no meaning."""
    if not temperature >= 0.0:
        raise GlassformerError(f"temperature must be >= 0 (0 = greedy), got {temperature}")
    if top_k is not None and (int(top_k) != top_k or top_k < 1):
        raise GlassformerError(f"top_k must be an integer >= 1, got {top_k}")
    if top_p is not None and not 0.0 < top_p <= 1.0:
        raise GlassformerError(f"top_p must be in (0, 1], got {top_p}")


def check_adjustments(record: "Sampling") -> None:
    """Clear errors for min_p, the penalties and logit_bias (OpenAI's ranges where it has one;
    logit_bias ids are checked against a vocabulary by whoever knows it: `check_bias_ids`)."""
    if record.min_p is not None and not 0.0 <= record.min_p <= 1.0:
        raise GlassformerError(f"min_p must be in [0, 1], got {record.min_p}")
    for name in ("presence_penalty", "frequency_penalty"):
        value = getattr(record, name)
        if not -2.0 <= value <= 2.0:
            raise GlassformerError(f"{name} must be in [-2, 2], got {value}")
    if not record.repetition_penalty > 0.0:
        raise GlassformerError(f"repetition_penalty must be > 0 (1 = off), got "
                               f"{record.repetition_penalty}")
    for token, value in record.logit_bias:
        if int(token) != token or token < 0:
            raise GlassformerError(f"logit_bias keys must be token ids >= 0, got {token!r}")
        if not -100.0 <= value <= 100.0:
            raise GlassformerError(f"logit_bias values must be in [-100, 100], got {value} "
                                   f"for token {token}")


def check_bias_ids(record: "Sampling", vocab_size: int) -> None:
    """Refuse a logit_bias naming an id outside a vocabulary of vocab_size ids."""
    unknown = [token for token, _ in record.logit_bias if token >= vocab_size]
    if unknown:
        raise GlassformerError(f"logit_bias names token id {unknown[0]}, outside this model's "
                               f"vocabulary of {vocab_size} ids (0 to {vocab_size - 1})")


@dataclass(frozen=True)
class Sampling:
    """How one row chooses its next token. Checked when made: a record that exists is valid."""
    temperature: float = 1.0          # 0: greedy
    top_k: int | None = None          # None: off
    top_p: float | None = None        # None or 1: off
    min_p: float | None = None        # None or 0: off
    presence_penalty: float = 0.0     # penalties.py; 0: off
    frequency_penalty: float = 0.0    # 0: off
    repetition_penalty: float = 1.0   # 1: off
    logit_bias: tuple = ()            # ((id, bias), ...): added to those logits

    def __post_init__(self):
        check_sampling(self.temperature, self.top_k, self.top_p)
        check_adjustments(self)

    @property
    def needs_history(self) -> bool:
        """Whether choosing reads the ids seen so far (a penalty is on)."""
        return (self.repetition_penalty != 1.0 or self.presence_penalty != 0.0
                or self.frequency_penalty != 0.0)


class SamplingRows(NamedTuple):
    """A batch of Sampling records as one array per field, one entry per row: what `sample`
    reads (a field's "off" value keeps every token, so mixed rows share one filter call)."""
    temperature: np.ndarray           # (B,) float64; 0: greedy
    top_k: np.ndarray                 # (B,) int64; 0: off
    top_p: np.ndarray                 # (B,) float64; 1: off
    min_p: np.ndarray                 # (B,) float64; 0: off
    presence_penalty: np.ndarray      # (B,) float64; 0: off
    frequency_penalty: np.ndarray     # (B,) float64; 0: off
    repetition_penalty: np.ndarray    # (B,) float64; 1: off
    logit_bias: list                  # B tuples of (id, bias) pairs

    def take(self, rows: np.ndarray) -> "SamplingRows":
        return SamplingRows(*(field[rows] if isinstance(field, np.ndarray)
                              else [field[i] for i in rows] for field in self))


def stack(records: list[Sampling]) -> SamplingRows:
    """B records -> SamplingRows of (B,) arrays."""
    return SamplingRows(
        temperature=np.array([r.temperature for r in records], dtype=np.float64),
        top_k=np.array([r.top_k or 0 for r in records], dtype=np.int64),
        top_p=np.array([1.0 if r.top_p is None else r.top_p for r in records], dtype=np.float64),
        min_p=np.array([r.min_p or 0.0 for r in records], dtype=np.float64),
        presence_penalty=np.array([r.presence_penalty for r in records], dtype=np.float64),
        frequency_penalty=np.array([r.frequency_penalty for r in records], dtype=np.float64),
        repetition_penalty=np.array([r.repetition_penalty for r in records], dtype=np.float64),
        logit_bias=[r.logit_bias for r in records])


def sample(logits: np.ndarray, records: list[Sampling], rngs: list,
           history: list | None = None) -> np.ndarray:
    """One id per row, each row with its own Sampling and generator: logits (B, V) -> (B,) int64.

    records: B Sampling values; rngs: B np.random.Generator (None for a greedy row; one
    generator may serve several rows, which then draw from it in row order); history: B
    penalties.History (each row's prompt and reply ids), needed when a record has a penalty.
    """
    settings = stack(records)
    logits = penalize(logits, settings, history)                    # (B, V) bias, penalties
    hot = settings.temperature > 0.0                                # (B,) rows that sample
    n_hot = np.count_nonzero(hot)
    if n_hot == 0:
        return np.argmax(logits, axis=-1).astype(np.int64)
    if n_hot == len(hot):             # every row samples: no greedy ids, no gathered copy
        ids = np.empty(len(hot), dtype=np.int64)
        sampled, chosen = slice(None), logits
    else:
        ids = np.argmax(logits, axis=-1).astype(np.int64)           # (B,) greedy rows keep this
        sampled = np.flatnonzero(hot)
        chosen, settings = logits[sampled], settings.take(sampled)  # (b, V)
        rngs = [rngs[row] for row in sampled]
    # float64, exact cumulative sums; one array: the cast and the division in one pass
    scaled = np.divide(chosen, settings.temperature[:, None], dtype=np.float64)   # (b, V)
    if settings.top_k.any():                                        # a filter only when used
        scaled = top_k_filter(scaled, settings.top_k)
    if (settings.top_p < 1.0).any():
        scaled = top_p_filter(scaled, settings.top_p[:, None])
    if settings.min_p.any():
        scaled = min_p_filter(scaled, settings.min_p[:, None])
    ids[sampled] = draw(scaled, uniforms(rngs))                     # draw.py: softmax's ids
    return ids


def sample_next(logits: np.ndarray, *, temperature: float = 1.0, top_k: int | None = None,
                top_p: float | None = None, rng: np.random.Generator | None = None
                ) -> np.ndarray:
    """Pick one id per row, every row with the same settings and generator. (B, V) -> (B,)."""
    rows = logits.shape[0]
    return sample(logits, [Sampling(temperature, top_k, top_p)] * rows, [rng] * rows)


def uniforms(rngs: list) -> np.ndarray:
    """One uniform in [0, 1) per row, from its own generator, in row order: b -> (b, 1)."""
    if None in rngs:
        raise GlassformerError("sampling with temperature > 0 needs rng, an np.random.Generator")
    if rngs.count(rngs[0]) == len(rngs):        # one generator (generate()): one call, same draws
        return rngs[0].random((len(rngs), 1))
    # note: a loop over rows, but only for one scalar each: every request owns its seed.
    return np.array([[rng.random()] for rng in rngs])


def top_k_filter(logits: np.ndarray, k) -> np.ndarray:
    """Set every logit below the k-th largest of its row to -inf. (B, V) -> (B, V).

    k: one int, or one per row as a (B,) array (0, or V and more: that row keeps every logit)."""
    vocab = logits.shape[-1]
    k = np.asarray(k, dtype=np.int64).reshape(-1)                  # (B,) or (1,): every row
    # the k-th largest sits at sorted position V - k; an "off" row reads position 0, its minimum
    position = np.where((k > 0) & (k < vocab), vocab - k, 0)
    if not position.any():
        return logits
    ordered = np.partition(logits, sorted(set(position.tolist())), axis=-1)  # those exact
    kth = ordered[np.arange(logits.shape[0]), position][:, None]    # (B, V) -> (B, 1)
    return np.where(logits < kth, -np.inf, logits)


def min_p_filter(logits: np.ndarray, min_p) -> np.ndarray:
    """Drop the tokens less likely than min_p times the row's most likely one. (B, V).

    min_p: one float, or one per row as a (B, 1) array (0: that row keeps every token).
    p_i < m p_max is logit_i < logit_max + log(m): no softmax needed; the top token stays."""
    min_p = np.asarray(min_p, dtype=np.float64)
    with np.errstate(divide="ignore"):
        floor = logits.max(axis=-1, keepdims=True) + np.log(min_p)     # (B, 1); m = 0: -inf
    return np.where(logits < floor, -np.inf, logits)
