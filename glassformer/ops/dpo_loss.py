"""The DPO loss (Rafailov et al. 2023, "Direct Preference Optimization"), sigmoid form.

Per pair i, with sequence log-probs summed over the completion's tokens (ops/token_logps.py):

    delta_i  = (pi_c - ref_c) - (pi_r - ref_r)          the policy's log-ratio margin
    loss     = mean_i -log sigmoid(beta * delta_i)
    dpi_c_i  = -beta * sigmoid(-beta * delta_i) / N     dpi_r_i = -dpi_c_i

The reference log-probs are constants (no gradient), as in TRL. -log sigmoid(z) is computed as
log(1 + exp(-z)) with np.logaddexp, so it cannot overflow for any z. When the policy equals the
reference, delta = 0 and the loss is log 2 = 0.693147: DPO's first step.

Numbers match TRL's DPOTrainer (loss_type "sigmoid", label_smoothing 0, reverse KL): its loss
and `rewards/*` metrics, beta * (pi - ref) per completion. Derivation: docs/derivations/dpo.md.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np


class DpoCtx(NamedTuple):
    """Saved for backward: sigmoid(-beta * delta) per pair (N,), beta, and N."""
    weight: np.ndarray
    beta: float
    n: int


def dpo_loss_forward(policy_chosen: np.ndarray, policy_rejected: np.ndarray,
                     ref_chosen: np.ndarray, ref_rejected: np.ndarray, *, beta: float
                     ) -> tuple[float, DpoCtx]:
    """Four (N,) sequence log-prob arrays -> (mean sigmoid DPO loss, ctx).

    >>> loss, _ = dpo_loss_forward(*[np.zeros(2)] * 4, beta=0.1)
    >>> round(loss, 6)        # policy == reference: log 2
    0.693147
    """
    delta = (policy_chosen - ref_chosen) - (policy_rejected - ref_rejected)   # (N,)
    z = delta.astype(np.float64) * beta                                       # (N,)
    losses = np.logaddexp(0.0, -z)                                            # -log sigmoid(z)
    weight = np.exp(-np.logaddexp(0.0, z))                                    # sigmoid(-z)
    return float(losses.mean()), DpoCtx(weight=weight, beta=float(beta), n=len(delta))


def dpo_loss_backward(dloss: float, ctx: DpoCtx) -> tuple[np.ndarray, np.ndarray]:
    """-> (dpolicy_chosen, dpolicy_rejected), each (N,) float64 (the references get none)."""
    dchosen = -float(dloss) * ctx.beta / ctx.n * ctx.weight                   # (N,)
    return dchosen, -dchosen


def dpo_rewards(policy_chosen, policy_rejected, ref_chosen, ref_rejected, *, beta: float
                ) -> dict:
    """TRL's metrics of a batch: implicit rewards beta * (pi - ref), and the policy's log-probs."""
    chosen = beta * (np.asarray(policy_chosen, np.float64) - ref_chosen)      # (N,)
    rejected = beta * (np.asarray(policy_rejected, np.float64) - ref_rejected)
    return {"rewards/chosen": float(chosen.mean()),
            "rewards/rejected": float(rejected.mean()),
            "rewards/accuracies": float((chosen > rejected).mean()),
            "rewards/margins": float((chosen - rejected).mean()),
            "logps/chosen": float(np.mean(policy_chosen)),
            "logps/rejected": float(np.mean(policy_rejected))}
