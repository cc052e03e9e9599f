"""Training an SAE on gathered activations (stream.py): Adam over shuffled batches, as SAELens's
SAETrainer does, with the decoder's rows kept at unit norm.

One step:
    1. loss and grads of a batch (model.py: sae_forward / sae_backward, SAELens's formulas)
    2. the part of each decoder row's gradient along the row itself is removed: with the row
       renormalised after the step it could only change the row's length (Bricken et al. 2023;
       SAELens before 6.0, `remove_gradient_parallel_to_decoder_directions`)
    3. the gradients clipped to global norm 1 (SAELens's trainer: clip_grad_norm_(..., 1.0))
    4. Adam (train/optim.py's adamw_step with no weight decay; SAELens: torch.optim.Adam)
    5. each decoder row divided by its norm (SAELens before 6.0: `set_decoder_norm_to_unit_norm`;
       SAELens 6 instead weighs the L1 by the norms, which is the loss computed here too)

Inputs are scaled first so that their mean norm is sqrt(C) (SAELens's
normalize_activations="expected_average_only_in"), which makes one L1 coefficient work across
models and layers; `fold_scale` puts the scale into the weights before saving, so the saved SAE
reads and writes the model's own activations.

A feature is dead when it has not fired for more than `dead_window` steps (SAELens's
dead_feature_window); a TopK SAE's auxiliary loss (ops/sae_aux.py) then asks the dead ones to
reconstruct what the live ones missed.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from glassformer.errors import GlassformerError
from glassformer.interpret.sae.model import SAEConfig, init_sae, sae_backward, sae_forward
from glassformer.ops.sae import sae_loss_parts
from glassformer.train.optim import adamw_init, adamw_step, clip_grad_norm

GRAD_CLIP = 1.0      # SAELens's trainer clips every step's gradients to this global norm


@dataclass(frozen=True)
class SAETrainConfig:
    steps: int = 1000           # Adam steps
    batch: int = 512            # activation rows per step
    lr: float = 4e-4            # Adam's learning rate (SAELens's default: 3e-4)
    dead_window: int = 200      # steps without firing after which a feature counts as dead
    log_every: int = 50         # steps between log lines

    def __post_init__(self):
        for name in ("steps", "batch", "dead_window", "log_every"):
            if getattr(self, name) < 1:
                raise GlassformerError(f"--{name.replace('_', '-')} must be >= 1, "
                                       f"got {getattr(self, name)}")
        if not self.lr > 0:
            raise GlassformerError(f"--lr must be > 0, got {self.lr}")


def input_scale(rows: np.ndarray) -> float:
    """sqrt(C) / the mean row norm: the factor that makes the mean norm sqrt(C)."""
    mean_norm = float(np.mean(np.linalg.norm(rows, axis=-1)))
    if not mean_norm > 0:
        raise GlassformerError("the activations are all zero: nothing to train an SAE on")
    return float(np.sqrt(rows.shape[-1])) / mean_norm


def unit_rows(w_dec: np.ndarray) -> np.ndarray:
    """Each decoder row divided by its norm, in place; returns w_dec."""
    w_dec /= np.maximum(np.linalg.norm(w_dec, axis=-1, keepdims=True), 1e-8)
    return w_dec


def without_parallel(dw_dec: np.ndarray, w_dec: np.ndarray) -> np.ndarray:
    """dW_dec less its component along each (unit) row of W_dec: (F, C)."""
    along = np.sum(dw_dec * w_dec, axis=-1, keepdims=True)          # (F, C) -> (F, 1)
    return dw_dec - along * w_dec


def fold_scale(params: dict, scale: float) -> dict:
    """Params that read unscaled x: the SAE saw x * scale and wrote out * scale, so
    W_enc * scale, b_dec / scale, W_dec / scale (b_enc and the activations unchanged)."""
    return {"w_enc": params["w_enc"] * scale, "b_enc": params["b_enc"].copy(),
            "w_dec": params["w_dec"] / scale, "b_dec": params["b_dec"] / scale}


def explained_variance(x: np.ndarray, out: np.ndarray) -> float:
    """SAELens's metrics/explained_variance: 1 - mean ||out - x||^2 / mean ||x - mean(x)||^2."""
    error = np.sum((out - x) ** 2, axis=-1)                          # (N, C) -> (N,)
    spread = np.sum((x - x.mean(axis=0)) ** 2, axis=-1)
    return 1.0 - float(error.mean()) / float(spread.mean())


def train_sae(rows: np.ndarray, cfg: SAEConfig, tcfg: SAETrainConfig, rng: np.random.Generator,
              log: Callable[[dict], None] | None = None) -> tuple[dict, float, list[dict]]:
    """Train on rows (N, C) -> (params on the scaled inputs, the scale, the log lines)."""
    if rows.ndim != 2 or rows.shape[1] != cfg.d_in:
        raise GlassformerError(f"expected activations (N, {cfg.d_in}), got {rows.shape}")
    if rows.shape[0] < tcfg.batch:
        raise GlassformerError(f"{rows.shape[0]:,} activation rows is fewer than one batch of "
                               f"{tcfg.batch:,} (raise --tokens or lower --batch)")
    scale = input_scale(rows)
    x_all = (rows * scale).astype(np.float32)
    params = init_sae(cfg, rng)
    params["b_dec"] = x_all.mean(axis=0)      # the decoder bias starts at the data's mean
    state = adamw_init(params)
    since_fired = np.zeros(cfg.d_sae, dtype=np.int64)
    order, cursor, lines = rng.permutation(len(x_all)), 0, []
    for step in range(1, tcfg.steps + 1):
        if cursor + tcfg.batch > len(order):            # a new pass over the rows, reshuffled
            order, cursor = rng.permutation(len(x_all)), 0
        x = x_all[order[cursor:cursor + tcfg.batch]]                     # (batch, C)
        cursor += tcfg.batch
        dead = since_fired > tcfg.dead_window                            # (F,) SAELens's mask
        loss, acts, out, ctx = sae_forward(params, x, cfg, dead=dead)
        grads, _ = sae_backward(ctx)
        grads["w_dec"] = without_parallel(grads["w_dec"], params["w_dec"])
        grads, _ = clip_grad_norm(grads, GRAD_CLIP)
        params, state = adamw_step(params, grads, state, lr=tcfg.lr, weight_decay=0.0)
        unit_rows(params["w_dec"])
        fired = (acts > 0).any(axis=0)                                   # (batch, F) -> (F,)
        since_fired = np.where(fired, 0, since_fired + 1)
        if step % tcfg.log_every == 0 or step == tcfg.steps:
            mse, l1 = sae_loss_parts(ctx.loss)
            line = {"step": step, "loss": loss, "mse": mse, "l1": l1,
                    "l0": float((acts > 0).sum(axis=-1).mean()),
                    "dead": int((since_fired > tcfg.dead_window).sum()),
                    "explained_variance": explained_variance(x, out)}
            lines.append(line)
            if log is not None:
                log(line)
    return params, scale, lines
