"""Direct Preference Optimization ("dpo"): learn from pairs of a chosen and a rejected reply.

    data   PrefData (train/datasets/prefs.py): each pair's chosen and rejected rows, with
           targets only on the completion's tokens
    draw   the next B pairs of the run's shuffled epochs (datasets/epochs.py) -> x, y (2B, T):
           the B chosen rows, then their B rejected rows, so chosen and rejected go through
           the model in ONE batched forward, as TRL's concatenated forward
    loss   ops/dpo_loss.py on sequence log-probs (ops/token_logps.py summed over the
           completion, the LM head run on the completion's positions only): the policy's,
           with gradient, against the reference's, without

The reference. `frozen` holds what the policy reads without training it (a LoRA run's base
weights and adapter constants); the reference is read from the same dict:

    default         the base weights with every adapter switched off (TRL with a PEFT model
                    and no ref_model: `use_adapter(model, None)` disables the adapters)
    REF_PREFIX keys "ref.<name>" entries: the reference's own weights, laid over the base
                    weights with the adapters off. `finetune --ref adapter` puts the starting
                    adapter there (TRL's frozen "ref" adapter); a --full run puts a copy of
                    every starting weight there (TRL's ref_model).

Data parallelism (--workers): each rank takes whole pairs (shard_pairs) and the loss, which
couples a pair's rows, is the whole batch's on every rank (train/objectives/ranks.py).

The reference runs in eval mode (no dropout); the policy in train mode. Gradients flow through
the policy's log-probs only, back through the model's own backward (LoRA: ops/lora.py).
The settings are DPOSettings (beta 0.1 and sft_weight 0 by default, TRL's DPOConfig's).

The SFT term (DPOSettings.sft_weight = alpha, `--sft-weight`; 0 by default): alpha times the
negative log-likelihood of the chosen replies, averaged over all their completion tokens in the
batch, is added to the DPO loss. That is TRL's `loss_type=["sigmoid", "sft"]` with
`loss_weights=[1, alpha]` (RPO's alpha, older TRL's `rpo_alpha`). DPO alone only moves chosen
against rejected; when no rejected reply is ever too long, nothing tells the policy where a
chosen reply stops, and the SFT term keeps it writing the chosen replies themselves. A sequence
log-prob is its tokens' sum, so the term's gradient reaches each chosen row's sum as
-alpha / N (N: the batch's chosen completion tokens, over every rank). The log adds the term
unweighted as `nll_loss` (older TRL's name for it): the first step of a run whose policy equals
its reference logs ln 2 + alpha * nll_loss.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import partial
from typing import NamedTuple

import numpy as np

from glassformer.blocks.lora import LORA_A, LORA_B, LORA_DROPOUT, LORA_SCALE
from glassformer.errors import GlassformerError
from glassformer.models.family import CAUSAL
from glassformer.ops.cross_entropy import IGNORE_INDEX
from glassformer.ops.dpo_loss import dpo_loss_backward, dpo_loss_forward, dpo_rewards
from glassformer.ops.token_logps import token_logps_backward, token_logps_forward
from glassformer.train.datasets.epochs import batch_rows
from glassformer.train.datasets.prefs import PrefData, pair_rows
from glassformer.train.objectives.objective import (PREFS, Objective, check_kind, counted_rows,
                                                    only_trained, with_frozen)
from glassformer.train.objectives.ranks import gather_rows, unit_slice
from glassformer.train.objectives.settings import Settings, setting

REF_PREFIX = "ref."     # frozen entries that are the reference's own weights
ADAPTER_PARTS = (LORA_A, LORA_B, LORA_SCALE, LORA_DROPOUT)
REFS = ("base", "adapter")   # what the reference is (policy_and_reference, reference_weights)


@dataclass(frozen=True)
class DPOSettings(Settings):
    """DPO's settings; the defaults are TRL's DPOConfig's (a recipe may give others)."""
    beta: float = setting(0.1, "how strongly the policy is tied to the reference (TRL's "
                               "default: 0.1)")
    sft_weight: float = setting(0.0, "weight of the chosen replies' negative log-likelihood "
                                     "added to the DPO loss (TRL's loss_type [sigmoid, sft], "
                                     "RPO's alpha; TRL's default: 0)")
    ref: str | None = setting(None, "the reference: base = the model with the trained adapter "
                                    "switched off, adapter = the starting adapter (--adapter) "
                                    "frozen (default: adapter when the run starts from one, "
                                    "else base, as TRL with PEFT)", choices=REFS)

    def __post_init__(self):
        self.check_types_and_choices()
        if not self.beta > 0.0:
            raise GlassformerError(f"--beta must be above 0 for DPO, got {self.beta}")
        if not self.sft_weight >= 0.0:
            raise GlassformerError(f"--sft-weight must be >= 0, got {self.sft_weight}")

    @property
    def needs_reference(self) -> bool:
        return True   # the loss compares the policy with it on every pair

    @property
    def reference(self) -> str:
        return self.ref or "base"

    def resolved(self, *, from_adapter: bool) -> "DPOSettings":
        """ref None: the starting adapter when the run continues one (TRL, given a PEFT model
        that already has an adapter, keeps it as the reference), else the base."""
        if self.ref == "adapter" and not from_adapter:
            raise GlassformerError("--ref adapter freezes the adapter the run starts from: give "
                                   "--adapter, or --ref base")
        if self.ref is not None:
            return self
        return dataclasses.replace(self, ref="adapter" if from_adapter else "base")


def chosen_tokens(comm, y: np.ndarray) -> float:
    """N of the SFT term: the completion tokens of the whole batch's chosen rows (y (2b, T))."""
    counts = (y[:y.shape[0] // 2] != IGNORE_INDEX).sum(axis=1).astype(np.float64)   # (b,)
    return max(float(gather_rows(comm, counts)[0].sum()), 1.0)   # every reply has its end


def chosen_nll(policy_chosen: np.ndarray, n_tokens: float) -> float:
    """TRL's "sft" loss: -mean log-prob of the chosen replies' n_tokens tokens, from their
    sequence sums (B,)."""
    return -float(np.sum(policy_chosen, dtype=np.float64)) / n_tokens


def policy_and_reference(params: dict, frozen: dict | None) -> tuple[dict, dict]:
    """(the weights the policy reads, the weights the reference reads: {} when there is none,
    a --full run's without ref.* copies); see the docstring."""
    frozen = frozen or {}
    base = {key: value for key, value in frozen.items() if not key.startswith(REF_PREFIX)}
    own = {key[len(REF_PREFIX):]: value for key, value in frozen.items()
           if key.startswith(REF_PREFIX)}
    switched_off = {key: value for key, value in base.items()
                    if key.rsplit(".", 1)[-1] not in ADAPTER_PARTS}
    return with_frozen(params, base), {**switched_off, **own}


def reference_weights(ref: str, *, full: bool, start: dict, adapter_constants: dict) -> dict:
    """The REF_PREFIX entries `frozen` holds for a run's reference (policy_and_reference reads
    them): none for "base" (the adapters switched off), the starting adapter for "adapter", a
    copy of every starting weight for a --full run. start: the trained params as the run starts."""
    if full:
        # the policy trains every weight: the reference is a copy of where it started
        return {REF_PREFIX + key: np.array(value) for key, value in start.items()}
    if ref == "base":
        return {}
    frozen_adapter = {**start, **adapter_constants}
    return {REF_PREFIX + key: np.array(value) for key, value in frozen_adapter.items()}


def draw_pairs(data: PrefData, train_cfg, rng: np.random.Generator | None = None, *,
               split: str = "data", step: int = 0, shuffle: bool = True
               ) -> tuple[np.ndarray, np.ndarray]:
    """Micro-batch `step`'s B pairs (datasets/epochs.py; rng is not needed) as (x, y), each
    (2B, T): chosen rows, then rejected; y is IGNORE_INDEX outside the completions. T is the
    longest input among them (at most block_size)."""
    if data.n == 0:
        raise GlassformerError(f"the {split} split holds no preference pairs")
    pairs = batch_rows(data.n, train_cfg, step=step, shuffle=shuffle)  # (B,)
    rows = pair_rows(data, pairs)                                      # (2B,)
    width = min(int(data.rows.lengths[rows].max()) - 1, train_cfg.block_size)   # T
    x = data.rows.ids[rows, :width].astype(np.int64)                   # (2B, T)
    y = data.rows.targets[rows, :width].astype(np.int64)               # (2B, T)
    return x, y


class SequenceLogps(NamedTuple):
    """sequence_logps' answer: the sums, and what the backward needs (None without one)."""
    logps: np.ndarray        # (2B,) sum of each row's completion token log-probs
    ctx: object              # the model's forward ctx (its head ran on the counted rows only)
    logp_ctx: object         # token_logps' ctx over those N positions, as one (1, N) row
    rows: np.ndarray         # (N,) the row of each counted position


def forget_layer(i: int, ctx, x_in: np.ndarray, x_out: np.ndarray) -> None:
    """An on_layer reader that reads nothing: models/common.py's layers_forward then keeps no
    layer's ctx, so each layer's activations are freed as the next layer runs."""


def sequence_logps(family, weights: dict, cfg, x, y, *, train: bool, rng=None,
                   backward: bool = True) -> SequenceLogps:
    """Each row's completion log-prob. The LM head and its log-softmax run only on the N
    counted positions (family.forward's head_rows, as SFT's counted_loss_and_grads): the other
    positions' log-probs are not summed, and over a 49,152-entry vocabulary they were most of
    the head's cost.

    backward=False: no backward follows (the reference, evaluation): no layer's activations
    are kept past the next layer (forget_layer) and ctx, logp_ctx are None, so the peak holds
    one layer's activations instead of all L layers' (for SmolLM2's 30 layers on 16 rows of
    150 tokens: gigabytes). The log-probs are the same numbers."""
    rows, cols = counted_rows(y)                                          # (N,), (N,)
    reader = {} if backward else {"on_layer": forget_layer}
    logits, ctx = family.forward(weights, x, cfg, train=train, rng=rng,
                                 head_rows=(rows, cols), **reader)        # (N, V)
    token_logp, logp_ctx = token_logps_forward(logits[None], y[rows, cols][None])   # (1, N)
    sums = np.bincount(rows, weights=token_logp[0], minlength=len(y))     # (2B,) float64
    if not backward:
        ctx = logp_ctx = None
    return SequenceLogps(sums.astype(token_logp.dtype), ctx, logp_ctx, rows)


def sequence_logps_backward(dseq: np.ndarray, seq: SequenceLogps) -> np.ndarray:
    """d loss / d (2B,) row sums -> dlogits (N, V) at the counted positions: each position's
    log-prob enters its row's sum once, so it gets its row's gradient."""
    dtoken = dseq[seq.rows][None]                                         # (1, N)
    return token_logps_backward(dtoken, seq.logp_ctx)[0]                  # (N, V)


def reference_logps(family, reference: dict, cfg, x, y) -> np.ndarray:
    """The reference's sequence log-probs (2B,): eval mode, forward only."""
    if not reference:
        raise GlassformerError("DPO needs a reference model: a LoRA run's base weights, or "
                               "ref.* weights (a --full run keeps a copy of its start)")
    return sequence_logps(family, reference, cfg, x, y, train=False, backward=False).logps


def shard_pairs(x: np.ndarray, y: np.ndarray, ranks: int, rank: int
                ) -> tuple[np.ndarray, np.ndarray]:
    """Rank `rank`'s whole pairs of a batch (2B, T): its chosen rows, then the same pairs'
    rejected rows (2B/ranks, T_r), cut to the last column any of them counts on."""
    n = y.shape[0] // 2
    pairs = unit_slice(n, ranks, rank, "preference pairs")
    chosen = np.arange(pairs.start, pairs.stop)                        # (B/ranks,)
    rows = np.concatenate([chosen, n + chosen])                        # (2B/ranks,)
    counts = (y[rows] != IGNORE_INDEX).any(axis=0)                     # (T,)
    width = int(np.nonzero(counts)[0].max()) + 1 if counts.any() else y.shape[1]
    return x[rows, :width], y[rows, :width]


def pair_logps(comm, logps: np.ndarray, ref: np.ndarray) -> tuple[tuple, slice]:
    """(policy chosen, policy rejected, reference chosen, reference rejected) of the whole
    batch's pairs, each (B,), from this rank's rows (2b,); and where its b pairs lie (ranks.py)."""
    n = len(logps) // 2
    parts = (logps[:n], logps[n:], ref[:n], ref[n:])
    gathered = [gather_rows(comm, part) for part in parts]
    return tuple(whole for whole, _ in gathered), gathered[0][1]


def dpo_loss_and_grads(family, params: dict, cfg, x, y: np.ndarray, *, rng=None,
                       dloss: float = 1.0, train_cfg=None, frozen: dict | None = None,
                       comm=None) -> tuple[float, dict, dict]:
    """(DPO loss, d(dloss * loss)/d params, TRL's metrics) on one batch of 2B rows.
    comm: this rank holds some of the batch's pairs (shard_pairs); the loss and metrics are
    the whole batch's, the grads those of its rows."""
    policy, reference = policy_and_reference(params, frozen)
    settings = train_cfg.objective_settings
    beta = settings.beta
    seq = sequence_logps(family, policy, cfg, x, y, train=True, rng=rng)
    ref = reference_logps(family, reference, cfg, x, y)                # (2b,)
    pairs, mine = pair_logps(comm, seq.logps, ref)                     # 4 x (B,)
    loss, loss_ctx = dpo_loss_forward(*pairs, beta=beta)
    dchosen, drejected = dpo_loss_backward(dloss, loss_ctx)           # (B,), (B,)
    metrics = dpo_rewards(*pairs, beta=beta)
    alpha = settings.sft_weight
    if alpha:
        n_tokens = chosen_tokens(comm, y)
        metrics["nll_loss"] = chosen_nll(pairs[0], n_tokens)          # older TRL's name
        loss = loss + alpha * metrics["nll_loss"]
        dchosen = dchosen - float(dloss) * alpha / n_tokens           # each chosen row's sum
    dseq = np.concatenate([dchosen[mine], drejected[mine]])            # (2b,): this rank's rows
    dlogits = sequence_logps_backward(dseq, seq)                       # (N, V)
    grads = only_trained(family.backward(dlogits, seq.ctx), params)
    return loss, grads, metrics


def dpo_eval_loss(family, params: dict, cfg, x, y: np.ndarray, *, train_cfg=None,
                  frozen: dict | None = None, comm=None) -> float:
    """The DPO loss in eval mode (no dropout), forward only (comm: of the whole batch)."""
    policy, reference = policy_and_reference(params, frozen)
    logps = sequence_logps(family, policy, cfg, x, y, train=False, backward=False).logps
    ref = reference_logps(family, reference, cfg, x, y)
    pairs, _ = pair_logps(comm, logps, ref)
    settings = train_cfg.objective_settings
    loss = dpo_loss_forward(*pairs, beta=settings.beta)[0]
    alpha = settings.sft_weight
    return loss + alpha * chosen_nll(pairs[0], chosen_tokens(comm, y)) if alpha else loss


DPO = Objective(name="dpo", kind=CAUSAL, reads=PREFS, draw=draw_pairs,
                loss_and_grads=dpo_loss_and_grads, eval_loss=dpo_eval_loss,
                check=partial(check_kind, CAUSAL), shard=shard_pairs,
                unit=("pairs", "a pair's chosen and rejected rows stay on one rank"),
                settings=DPOSettings)
