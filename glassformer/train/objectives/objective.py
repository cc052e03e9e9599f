"""What a run learns: the `Objective` record, the whole front door of one kind of training.

The training loop (train/loop.py) and the run folders (train/runs/) are the same for every kind of
training; an `Objective` holds everything that differs:

    kind       the Family.kind it trains (models/family.py): CAUSAL, ENCODER, ENCODER_DECODER
    reads      what its data file is, the name of a form (train/runs/forms.py FORMS): TEXT (a
               token stream), PAIRS (source/target pairs), CHAT (conversations), PREFS
               (preference pairs) or PROMPTS; the form reads, splits and batches it
    prepare(ids, tokenizer) -> data
               a TEXT objective's split (1-D token ids) -> what its draw reads (the ids
               themselves, or masked-LM's record with its special ids)
    check(family, cfg, tokenizer) -> None
               refuses, in one line, a model or tokenizer it cannot train (before anything is
               written); `check_kind` is the part every objective shares
    char_specials   the special tokens a default char vocabulary gets after its characters
    bits_per_byte   whether its val loss is a next-token code length (logged as val_bpb)
    draw(data, train_cfg, rng, *, split, step, shuffle) -> (x, y)
        x: int ids (B, T), or a tuple of arrays with the rows on axis 0 (an encoder-decoder's
           (source, target input)); y: (B, T') int64 targets, IGNORE_INDEX where no loss counts.
        A token stream's draw takes random windows from rng. A record dataset's takes the
        records of micro-batch `step` of the run's seeded shuffled epochs (shuffle, training)
        or eval batch `step` of the split in order (datasets/epochs.py): nothing but the
        iteration decides them, so a resume draws the same.
    loss_and_grads(family, params, cfg, x, y, *, rng, dloss, train_cfg, frozen)
        -> (loss, grads, metrics): the mean loss on (x, y), d(dloss * loss)/d params for the
        keys of `params` only, and {name: float} logged beside train_loss ({} for most; DPO's
        rewards, GRPO's rewards and clip ratios).
    eval_loss(family, params, cfg, x, y, *, train_cfg, frozen) -> float
        the same loss in eval mode (no dropout), forward only.
    eval_stats(family, params, cfg, batches, *, train_cfg, frozen) -> dict, or None
        what else an evaluation logs, from the val batches it drew ([(x, y), ...]): a
        Mixture-of-Experts run's expert load and auxiliary loss (moe_next_token.py).
    rule(params, grads, train_cfg) -> None, or None
        params that follow a rule rather than their gradient (DeepSeek-V3's router bias): from
        what loss_and_grads put in their grads (summed over micro-batches and ranks), it moves
        them in place and zeroes those grads, so the clip and AdamW leave them as they are. The
        step calls it once per optimizer step; a data-parallel rank, on its group of keys.

    shard(x, y, ranks, rank) -> (x_r, y_r), or None
        for objectives whose rows come in units (DPO's pairs, GRPO's groups): rank r's whole
        units of a batch. Their loss_and_grads and eval_loss then also take `comm` and return
        the whole batch's loss and metrics on every rank, with the grads of the rank's own
        rows (ranks.py).
    unit       with `shard`: (what a unit is, why it stays whole), for the one line that
               refuses a --batch-size that does not split evenly over the ranks
    settings   the objective's own settings class (settings.py): its fields are TrainConfig.
               objective_settings, its flags, its checks; NoSettings when it has none

`frozen` holds weights the forward reads but the optimizer never updates (a LoRA run's base
model); it is {} when everything trains. Data parallelism (train/distributed.py) splits x's and
y's rows over the ranks, and weighs each rank's loss by its share of the counted targets (an
objective with `shard` splits and weighs its own way).

Each objective is one file beside this one (next_token.py, mlm.py, seq2seq.py, sft.py, dpo.py,
grpo.py, moe_next_token.py) and one line in train/objectives/__init__.py; a command reaches it
through a recipe (train/recipes/). CONTRIBUTING.md's "Adding an objective" says how.
"""
from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np

from glassformer.errors import GlassformerError
from glassformer.models.family import CAUSAL, ENCODER, ENCODER_DECODER
from glassformer.models.registry import FAMILIES
from glassformer.ops.cross_entropy import (IGNORE_INDEX, cross_entropy_backward,
                                           cross_entropy_forward)
from glassformer.train.objectives.settings import NoSettings

# What an objective's data file is (Objective.reads): each names a form of train/runs/forms.py,
# which says how that file is read, checked, split, batched and read again on resume
TEXT = "text"        # UTF-8 text, encoded into one token stream (train/data.py)
PAIRS = "pairs"      # source/target pairs: cmudict, tang-couplets:PATH, TSV (datasets/pairs.py)
CHAT = "chat"        # chat JSONL conversations (train/datasets/chat.py)
PREFS = "prefs"      # preference pairs (train/datasets/prefs.py)
PROMPTS = "prompts"  # prompts, with the columns the rewards read (train/datasets/prompts.py)


class Objective(NamedTuple):
    """Everything one kind of training owns (see the module docstring)."""
    name: str                 # as TrainConfig.objective and --objective spell it
    kind: str                 # the Family.kind it trains (models/family.py)
    reads: str                # TEXT, PAIRS, CHAT, PREFS or PROMPTS: its data's form
    draw: Callable            # draw(data, train_cfg, rng, *, split, step, shuffle) -> (x, y)
    loss_and_grads: Callable  # (family, params, cfg, x, y, *, rng, dloss, train_cfg, frozen)
    #                           -> (loss, grads, metrics)
    eval_loss: Callable       # (family, params, cfg, x, y, *, train_cfg, frozen) -> float
    check: Callable           # check(family, cfg, tokenizer) -> None, or a GlassformerError
    prepare: Callable | None = None     # TEXT only: prepare(ids, tokenizer) -> draw's data
    char_specials: tuple[str, ...] = ()  # a default char vocabulary's special tokens
    bits_per_byte: bool = False         # its val loss is a next-token code length
    eval_stats: Callable | None = None  # (family, params, cfg, batches, *, train_cfg, frozen)
                                        # -> {log key: value}, more of each eval's record
    rule: Callable | None = None        # rule(params, grads, train_cfg): params moved by a rule
    shard: Callable | None = None       # shard(x, y, ranks, rank) -> rank's whole units
    unit: tuple[str, str] | None = None  # with shard: (a unit, why it stays on one rank)
    settings: type = NoSettings         # its settings class (settings.py)


# Family.kind in words, for messages
KIND_WORDS = {CAUSAL: "a causal LM", ENCODER: "an encoder", ENCODER_DECODER: "an encoder-decoder"}


def kind_in_words(kind: str) -> str:
    """'a causal LM (gpt2 or llama)': the kind, and the registered families of that kind."""
    names = [name for name, family in FAMILIES.items() if family.kind == kind]
    return f"{KIND_WORDS[kind]} ({' or '.join(names)})"


def check_kind(kind: str, family, cfg=None, tokenizer=None) -> None:
    """The model must be of the kind an objective trains (Family.kind). An objective with nothing
    else to check has `partial(check_kind, KIND)` as its `check`."""
    if family.kind != kind:
        raise GlassformerError(f"this objective trains {kind_in_words(kind)}, got {family.name}")


def rows_of(x, rows: slice):
    """x[rows] for an array, or for each array of a tuple (its type kept)."""
    if isinstance(x, tuple):
        parts = [part[rows] for part in x]
        return type(x)(*parts) if hasattr(x, "_fields") else tuple(parts)   # a NamedTuple too
    return x[rows]


def with_frozen(params: dict, frozen: dict | None) -> dict:
    """Every weight the forward reads: the frozen ones, then the trained ones (which win)."""
    return {**frozen, **params} if frozen else params


def only_trained(grads: dict, params: dict) -> dict:
    """The grads of the trained keys (a family may also return some for frozen weights)."""
    if grads.keys() == params.keys():
        return grads
    return {key: grads[key] for key in params}


def label_smoothing_of(train_cfg) -> float:
    """The run's cross-entropy label smoothing (0 without a run's settings)."""
    return 0.0 if train_cfg is None else float(train_cfg.label_smoothing)


def token_loss_and_grads(family, params: dict, cfg, x, y: np.ndarray, *,
                         rng: np.random.Generator | None, dloss: float = 1.0, train_cfg=None,
                         frozen: dict | None = None) -> tuple[float, dict, dict]:
    """Mean cross-entropy of family.forward's logits against y, d(dloss * loss)/d params, and no
    metrics ({}).

    Any objective whose model maps x to (B, T', V) logits for the targets y uses this: next-token,
    masked-LM (y ignores the unmasked positions), chat fine-tuning (y ignores the prompts),
    encoder-decoder (x = (source, target input)). dloss < 1 scales one micro-batch's gradient
    under gradient accumulation.
    """
    smoothing = label_smoothing_of(train_cfg)
    logits, ctx = family.forward(with_frozen(params, frozen), x, cfg, train=True,
                                 rng=rng)                                # (B, T', V)
    loss, ce_ctx = cross_entropy_forward(logits, y, label_smoothing=smoothing)
    dlogits = cross_entropy_backward(np.asarray(dloss, dtype=logits.dtype), ce_ctx)
    return float(loss), only_trained(family.backward(dlogits, ctx), params), {}


def token_eval_loss(family, params: dict, cfg, x, y: np.ndarray, *, train_cfg=None,
                    frozen: dict | None = None) -> float:
    """token_loss_and_grads' loss in eval mode (no dropout), forward only."""
    smoothing = label_smoothing_of(train_cfg)
    logits, _ = family.forward(with_frozen(params, frozen), x, cfg, train=False)
    loss, _ = cross_entropy_forward(logits, y, label_smoothing=smoothing)
    return float(loss)


def counted_rows(y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The N (row, column) positions of y whose target counts (not IGNORE_INDEX)."""
    return np.nonzero(y != IGNORE_INDEX)


def counted_loss_and_grads(family, params: dict, cfg, x: np.ndarray, y: np.ndarray, *,
                           rng: np.random.Generator | None, dloss: float = 1.0, train_cfg=None,
                           frozen: dict | None = None) -> tuple[float, dict, dict]:
    """token_loss_and_grads with the head run only where y counts (family.forward's head_rows).

    The other positions' logits get zero gradient, so gathering the counted rows of the last
    hidden state, running the head on those (N, C) rows and scattering dx back gives the same
    loss and gradients at N / (B T) of the head's and the log-softmax's cost: most of a step
    when the vocabulary is large and only replies (SFT) or masked tokens (MLM) carry a loss.
    """
    smoothing = label_smoothing_of(train_cfg)
    rows = counted_rows(y)
    logits, ctx = family.forward(with_frozen(params, frozen), x, cfg, train=True, rng=rng,
                                 head_rows=rows)                         # (N, V)
    loss, ce_ctx = cross_entropy_forward(logits, y[rows], label_smoothing=smoothing)
    dlogits = cross_entropy_backward(np.asarray(dloss, dtype=logits.dtype), ce_ctx)
    return float(loss), only_trained(family.backward(dlogits, ctx), params), {}


def counted_eval_loss(family, params: dict, cfg, x: np.ndarray, y: np.ndarray, *,
                      train_cfg=None, frozen: dict | None = None) -> float:
    """counted_loss_and_grads' loss in eval mode (no dropout), forward only."""
    smoothing = label_smoothing_of(train_cfg)
    rows = counted_rows(y)
    logits, _ = family.forward(with_frozen(params, frozen), x, cfg, train=False, head_rows=rows)
    loss, _ = cross_entropy_forward(logits, y[rows], label_smoothing=smoothing)
    return float(loss)
