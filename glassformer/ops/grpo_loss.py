"""GRPO (Shao et al. 2024, "DeepSeekMath"; as TRL's GRPOTrainer computes it): group advantages
and the clipped surrogate loss over completion tokens.

Advantages. G completions are sampled per prompt; reward function k gives r_ik (NaN for None)
and the weighted sum r_i = sum_k w_k r_ik (NaN when every function said None):

    A_i = (r_i - mean_group(r)) / (std_group(r) + 1e-4)    scale "group"  (std with Bessel's n-1)
    A_i = (r_i - mean_group(r)) / (std_batch(r) + 1e-4)    scale "batch"
    A_i =  r_i - mean_group(r)                             scale "none"
    means and stds skip NaN; a NaN advantage (an unscorable completion) becomes 0

Loss, per completion token t of completion i (mask m_it), with ratio rho = exp(logp - old_logp):

    l_it = -min(rho A_i, clip(rho, 1 - eps_low, 1 + eps_high) A_i)  + beta * kl_it
    kl_it = rho * (exp(ref - logp) - (ref - logp) - 1)               (k3, only if beta > 0)
            the k3 estimator of KL(policy || reference), times rho: TRL's default importance-
            sampling correction (use_bias_correction_kl); rho = 1 on-policy, where its value is
            plain k3 but its gradient gains k3 itself

reduced by `loss_type` exactly as TRL does:

    grpo     mean_i (sum_t m l / max(sum_t m, 1))           each sequence's mean, then the mean
    bnpo     sum m l / max(sum m, 1)                        the mean over every token of the batch
    dapo     sum m l / max(sum m, 1)                        ditto (TRL: over the generation batch;
                                                            one micro-batch here, so the same)
    dr_grpo  sum m l / (N * max_completion_length)          a constant denominator

Gradient. d l / d logp = -A rho where the unclipped term is the min (or rho lies inside the
clip range), else 0: a clipped token passes no gradient; plus
beta * rho * (1 - exp(ref - logp) + k3).
With one update per generation (TRL's default num_iterations=1) old_logp is logp itself, so
rho = 1, nothing is clipped, and the gradient is -A per token, scaled by the reduction.
Derivation: docs/derivations/grpo.md.
"""
from __future__ import annotations

import warnings
from typing import NamedTuple

import numpy as np

from glassformer.errors import GlassformerError, check_choice

STD_EPS = 1e-4          # TRL's: added to the std, so a group with one reward value gives A = 0
LOSS_TYPES = ("grpo", "bnpo", "dr_grpo", "dapo")
SCALES = ("group", "batch", "none")


class GrpoCtx(NamedTuple):
    """Saved for backward: d l_it / d logp_it per token (N, T), already masked, and the
    reduction's weight per token (N, T)."""
    dtoken: np.ndarray
    weight: np.ndarray


def _nanstd(x: np.ndarray, axis=None) -> np.ndarray:
    """TRL's nanstd: the std of the non-NaN values with Bessel's correction (NaN for fewer
    than two values)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)   # all-NaN or one value: NaN, as TRL
        return np.nanstd(x, axis=axis, ddof=1)


def group_advantages(rewards_per_func: np.ndarray, weights: np.ndarray, group: int, *,
                     scale: str = "group") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """rewards_per_func (N, F) (NaN for None), weights (F,), N = prompts x group ->
    (advantages (N,), summed rewards (N,) NaN where unscorable, std_is_zero (N,) bool)."""
    check_choice("scale_rewards", scale, SCALES)
    unscorable = np.isnan(rewards_per_func).all(axis=1)                        # (N,)
    rewards = np.nansum(rewards_per_func * weights[None, :], axis=1)            # (N,)
    rewards[unscorable] = np.nan
    grouped = rewards.reshape(-1, group)                                        # (P, G)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)   # an all-NaN group's mean is NaN
        mean = np.repeat(np.nanmean(grouped, axis=1), group)                    # (N,)
    if scale == "batch":
        std = np.full_like(rewards, _nanstd(rewards)) if rewards.size > 1 else 0.0 * rewards
    else:
        std = np.repeat(_nanstd(grouped, axis=1), group) if group > 1 else 0.0 * rewards
    advantages = rewards - mean
    if scale != "none":
        advantages = advantages / (std + STD_EPS)
    std_is_zero = np.isclose(std, 0.0)
    return np.nan_to_num(advantages, nan=0.0), rewards, std_is_zero


def reduction_weights(mask: np.ndarray, loss_type: str, max_completion_length: int
                      ) -> np.ndarray:
    """(N, T) weights w with loss = sum w * l: the loss type's reduction (see the docstring)."""
    check_choice("loss type", loss_type, LOSS_TYPES)
    mask = mask.astype(np.float64)
    if loss_type == "grpo":
        per_row = np.maximum(mask.sum(axis=1, keepdims=True), 1.0)              # (N, 1)
        return mask / per_row / mask.shape[0]
    if loss_type in ("bnpo", "dapo"):
        return mask / max(float(mask.sum()), 1.0)
    return mask / (mask.shape[0] * float(max_completion_length))              # dr_grpo


def grpo_loss_forward(logps: np.ndarray, old_logps: np.ndarray, advantages: np.ndarray,
                      mask: np.ndarray, *, ref_logps: np.ndarray | None = None,
                      beta: float = 0.0, epsilon: float = 0.2, epsilon_high: float | None = None,
                      loss_type: str = "dapo", max_completion_length: int = 1,
                      weight: np.ndarray | None = None) -> tuple[float, GrpoCtx, dict]:
    """logps, old_logps (and ref_logps) (N, T), advantages (N,), mask (N, T) bool ->
    (loss, ctx, TRL's clip (and kl) metrics). Computed in float64.

    weight (N, T): each token's weight in a larger batch's loss, when these rows are part of it
    (a chunk of rows, a rank's rows): reduction_weights of the whole batch's mask, these rows'
    entries. The loss is then these rows' share of that loss (shares add up to it); each
    token's gradient needs only its own numbers and weight, so the shares' backward passes add
    up to the whole batch's. None: reduction_weights(mask, loss_type, ...), these rows alone."""
    eps_low, eps_high = float(epsilon), float(epsilon if epsilon_high is None else epsilon_high)
    logps = logps.astype(np.float64)
    adv = advantages.astype(np.float64)[:, None]                               # (N, 1)
    ratio = np.exp(logps - old_logps)                                          # (N, T)
    clipped = np.clip(ratio, 1.0 - eps_low, 1.0 + eps_high)                    # (N, T)
    unclipped_term, clipped_term = ratio * adv, clipped * adv                  # (N, T)
    per_token = -np.minimum(unclipped_term, clipped_term)                      # (N, T)
    inside = (ratio >= 1.0 - eps_low) & (ratio <= 1.0 + eps_high)
    passes = (unclipped_term < clipped_term) | inside     # where the min follows rho
    dtoken = np.where(passes, -unclipped_term, 0.0)                           # d l / d logp
    metrics = clip_metrics(ratio, adv, mask, eps_low, eps_high)
    if beta != 0.0:
        if ref_logps is None:
            raise GlassformerError("beta > 0 needs the reference's log-probs")
        gap = ref_logps - logps                                                # (N, T)
        k3 = np.exp(gap) - gap - 1.0                                           # (N, T)
        kl = k3 * ratio                # TRL's use_bias_correction_kl (its default)
        per_token = per_token + beta * kl
        # d(k3 rho)/d logp = (1 - exp(gap)) rho + k3 rho   (d rho / d logp = rho)
        dtoken = dtoken + beta * ratio * (1.0 - np.exp(gap) + k3)
        metrics["kl"] = float((kl * mask).sum() / max(float(mask.sum()), 1.0))
    if weight is None:
        weight = reduction_weights(mask, loss_type, max_completion_length)     # (N, T)
    loss = float((per_token * weight).sum())
    return loss, GrpoCtx(dtoken=np.where(mask, dtoken, 0.0), weight=weight), metrics


def grpo_loss_backward(dloss: float, ctx: GrpoCtx) -> np.ndarray:
    """-> dlogps (N, T) float64 (old and reference log-probs are constants)."""
    return float(dloss) * ctx.weight * ctx.dtoken


def clip_metrics(ratio, adv, mask, eps_low: float, eps_high: float) -> dict:
    """TRL's clip_ratio/* metrics: shares of completion tokens whose ratio was clipped."""
    low = (ratio < 1.0 - eps_low) & (adv < 0)                                  # (N, T)
    high = (ratio > 1.0 + eps_high) & (adv > 0)
    count = max(float(mask.sum()), 1.0)
    per_row = np.maximum(mask.sum(axis=1), 1)                                  # (N,)
    return {"clip_ratio/low_mean": float((low & mask).sum() / count),
            "clip_ratio/high_mean": float((high & mask).sum() / count),
            "clip_ratio/region_mean": float(((low | high) & mask).sum() / count),
            "clip_ratio/low_min": float(((low & mask).sum(axis=1) / per_row).min()),
            "clip_ratio/high_max": float(((high & mask).sum(axis=1) / per_row).max())}
