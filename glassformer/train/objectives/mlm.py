"""The masked-language-model objective ("mlm"): BERT's pretraining task (Devlin et al. 2019, §3.1).

One training sequence is a window of the token stream framed as BERT frames a text:

    [CLS] t1 t2 ... t_{T-2} [SEP]                          ids (B, T), T = block size

Of the T - 2 text positions, round(mask_prob * (T - 2)) are chosen (at least one), and each chosen
token is, as in the paper:

    80%  replaced by [MASK]          the model must recover it from both sides
    10%  replaced by a random token  so it cannot trust the visible tokens blindly
    10%  left unchanged              so it also predicts at positions that look normal

The target y is the original token at the chosen positions and IGNORE_INDEX (-100) everywhere
else, so the cross-entropy (ops/cross_entropy.py) counts only the chosen positions.

Selection rule: an exact count per sequence, as Google's create_pretraining_data.py
(num_to_predict = max(1, round(len * masked_lm_prob))), not HF DataCollatorForLanguageModeling's
per-token Bernoulli(0.15). Why: our windows are all T tokens long (no padding), so with an exact
count every row and every batch counts the same number of targets. The mean loss then weighs
every row alike, its gradient has the same scale step after step, a data-parallel shard's weight
(its share of the counted targets) is exactly its share of the rows, and no row is ever left with
nothing to predict. Bernoulli would give the same 15% on average, with a count that varies.

Why windows rather than one poem per row: like the decoder recipe, the whole split is one stream
and a sequence is any T - 2 consecutive tokens (poems separated by their newline), so no position
is padding, no compute is spent on it, the validation split is the same "last 10% of the file",
and RoBERTa's FULL-SENTENCES packing shows packed windows train BERT as well as single documents.

New masks every draw: `draw` takes the positions, the 80/10/10 choice and the random tokens from
the run's batch generator (train/loop.py saves its state in every checkpoint), so a resumed run
draws the very masks the uninterrupted run would have drawn.

The loss runs the MLM head only on the chosen positions (about 15% of them): the other positions
have zero gradient, so gathering the chosen rows of the last hidden state, running the head on
those (N, C) rows and scattering dhidden back (models/bert.py's forward with head_rows) gives the loss and every gradient of the full (B, T, V)
head (tests/train/test_mlm.py checks it against family.forward's full logits) at about a seventh of
the head's cost, which with a large character vocabulary is most of a small model's step.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from glassformer.errors import GlassformerError
from glassformer.models.family import ENCODER
from glassformer.ops.cross_entropy import IGNORE_INDEX
from glassformer.tokenizers.char_wordpiece import BERT_SPECIALS
from glassformer.train.data import get_batch
from glassformer.train.objectives.objective import (TEXT, Objective, counted_eval_loss,
                                                    counted_loss_and_grads)
from glassformer.train.objectives.settings import Settings, setting

MASK_SHARE = 0.8         # of the chosen tokens: replaced by [MASK]
RANDOM_SHARE = 0.1       # ... replaced by a random token (the other 10% stay as they are)


@dataclass(frozen=True)
class MLMSettings(Settings):
    """Masked-LM's settings; the default is the paper's."""
    mask_prob: float = setting(0.15, "share of the tokens chosen to predict, 80% of them "
                                     "[MASK]ed, 10% random, 10% kept (the paper's 0.15)")

    def __post_init__(self):
        self.check_types_and_choices()
        if not 0.0 <= self.mask_prob < 1.0:
            raise GlassformerError(f"--mask-prob must be in [0, 1), got {self.mask_prob}")


class MLMData(NamedTuple):
    """What `draw` reads for one split (train or val)."""
    tokens: np.ndarray       # (N,) int ids of the split, one stream
    cls_id: int              # [CLS], first of every sequence
    sep_id: int              # [SEP], last of every sequence
    mask_id: int             # [MASK]
    random_ids: np.ndarray   # (R,) the ids a "random token" is drawn from: the non-special ones


def check_mlm_vocabulary(special_tokens: dict[str, int]) -> None:
    """A masked-LM run frames with [CLS] ... [SEP] and masks with [MASK]: all three must exist."""
    missing = [name for name in ("[CLS]", "[SEP]", "[MASK]") if name not in special_tokens]
    if missing:
        raise GlassformerError(f"--objective mlm needs a vocabulary with [CLS], [SEP] and [MASK]; "
                               f"this tokenizer has no {', '.join(missing)}")


def mlm_data(tokens: np.ndarray, special_tokens: dict[str, int], vocab_size: int) -> MLMData:
    """MLMData for a split's ids, given the tokenizer's special tokens and vocabulary size."""
    check_mlm_vocabulary(special_tokens)
    special_ids = np.array(sorted(special_tokens.values()), dtype=np.int64)
    random_ids = np.setdiff1d(np.arange(vocab_size, dtype=np.int64), special_ids)
    return MLMData(tokens=tokens, cls_id=special_tokens["[CLS]"],
                   sep_id=special_tokens["[SEP]"], mask_id=special_tokens["[MASK]"],
                   random_ids=random_ids)


def choose_positions(rng: np.random.Generator, rows: int, length: int,
                     mask_prob: float) -> np.ndarray:
    """(rows, length) bool: exactly max(1, round(mask_prob * length)) True per row, uniformly.

    Each row ranks its positions by a uniform key and takes the k smallest (a random k-subset,
    as Google's shuffle-then-take-k), for all rows in one argsort.
    """
    k = max(1, int(round(mask_prob * length)))
    keys = rng.random((rows, length))                                  # (B, n)
    picked = np.argsort(keys, axis=1)[:, :k]                           # (B, n) -> (B, k)
    chosen = np.zeros((rows, length), dtype=bool)
    np.put_along_axis(chosen, picked, True, axis=1)
    return chosen


def mask_tokens(body: np.ndarray, data: MLMData, rng: np.random.Generator,
                mask_prob: float) -> tuple[np.ndarray, np.ndarray]:
    """body (B, n) ids -> (corrupted inputs (B, n), targets (B, n) with IGNORE_INDEX elsewhere).

    note: every array is drawn whole, whatever was chosen, so the generator advances by the same
    amount every draw (the stream of masks never depends on the data).
    """
    chosen = choose_positions(rng, body.shape[0], body.shape[1], mask_prob)     # (B, n)
    action = rng.random(body.shape)                                              # (B, n)
    random_tokens = data.random_ids[rng.integers(0, len(data.random_ids), size=body.shape)]
    to_mask = chosen & (action < MASK_SHARE)
    to_random = chosen & (action >= MASK_SHARE) & (action < MASK_SHARE + RANDOM_SHARE)
    inputs = np.where(to_mask, data.mask_id, body)
    inputs = np.where(to_random, random_tokens, inputs)
    targets = np.where(chosen, body, IGNORE_INDEX)
    return inputs, targets


def draw_masked(data: MLMData, train_cfg, rng: np.random.Generator, *,
                split: str = "data", step: int = 0, shuffle: bool = True
                ) -> tuple[np.ndarray, np.ndarray]:
    """B random windows [CLS] + (T - 2) ids + [SEP], masked: (x (B, T) int64, y (B, T) int64);
    every choice from rng (step and shuffle are the record datasets' and unused here)."""
    block = train_cfg.block_size
    if block < 3:
        raise GlassformerError(f"--objective mlm needs a block size of at least 3 ([CLS], one "
                               f"token, [SEP]), got {block}")
    body, _ = get_batch(data.tokens, train_cfg.batch_size, block - 2, rng, split=split)
    mask_prob = train_cfg.objective_settings.mask_prob
    inputs, targets = mask_tokens(body, data, rng, mask_prob)                   # (B, T - 2)
    rows = body.shape[0]
    cls = np.full((rows, 1), data.cls_id, dtype=np.int64)
    sep = np.full((rows, 1), data.sep_id, dtype=np.int64)
    ignored = np.full((rows, 1), IGNORE_INDEX, dtype=np.int64)
    x = np.concatenate([cls, inputs, sep], axis=1)                   # (B, T - 2) -> (B, T)
    y = np.concatenate([ignored, targets, ignored], axis=1)          # (B, T - 2) -> (B, T)
    return x, y


def check_model(family, cfg) -> None:
    """A BERT (an encoder) with its masked-LM head."""
    if family.kind != ENCODER or not getattr(cfg, "mlm_head", False):
        raise GlassformerError(f"--objective mlm trains a BERT with a masked-LM head; this model "
                               f"is {family.name}" + ("" if family.kind != ENCODER
                                                     else " without one"))


def check_mlm(family, cfg, tokenizer=None) -> None:
    """The objective's check: the model (check_model) and, when given, the tokenizer's
    [CLS] [SEP] [MASK] (check_mlm_vocabulary)."""
    check_model(family, cfg)
    if tokenizer is not None:
        check_mlm_vocabulary(tokenizer.special_tokens)


def masking_data(ids: np.ndarray, tokenizer) -> MLMData:
    """The objective's prepare: a split's ids with the tokenizer's special ids (mlm_data)."""
    return mlm_data(ids, tokenizer.special_tokens, tokenizer.vocab_size)


def mlm_loss_and_grads(family, params: dict, cfg, x: np.ndarray, y: np.ndarray, *,
                       rng: np.random.Generator | None, dloss: float = 1.0, train_cfg=None,
                       frozen: dict | None = None) -> tuple[float, dict, dict]:
    """Mean cross-entropy at the chosen positions of y, d(dloss * loss)/d params, no metrics.

    The head runs on the chosen rows only (module docstring; models/bert.py's head_rows,
    objective.py's counted_loss_and_grads); the result is the same as token_loss_and_grads on
    family.forward's full logits.
    """
    check_model(family, cfg)
    return counted_loss_and_grads(family, params, cfg, x, y, rng=rng, dloss=dloss,
                                  train_cfg=train_cfg, frozen=frozen)


def mlm_eval_loss(family, params: dict, cfg, x: np.ndarray, y: np.ndarray, *, train_cfg=None,
                  frozen: dict | None = None) -> float:
    """mlm_loss_and_grads' loss in eval mode (no dropout), forward only."""
    check_model(family, cfg)
    return counted_eval_loss(family, params, cfg, x, y, train_cfg=train_cfg, frozen=frozen)


MLM = Objective(name="mlm", kind=ENCODER, reads=TEXT, draw=draw_masked,
                loss_and_grads=mlm_loss_and_grads, eval_loss=mlm_eval_loss, check=check_mlm,
                prepare=masking_data, char_specials=BERT_SPECIALS, settings=MLMSettings)
