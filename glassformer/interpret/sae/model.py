"""A sparse autoencoder: its config, its params, and one training step's loss and gradients.

    acts = Encode(x)                 ops/sae.py: (x - b_dec) @ W_enc + b_enc, then ReLU or TopK
    out  = acts @ W_dec + b_dec      ops/linear.py
    loss = mse(out, x) + l1 * sum_f acts_f ||W_dec[f]||     (l1 only for the ReLU SAE)
         + AuxK (TopK only, when features are dead: ops/sae_aux.py)

Params (SAELens's tensors, in glassformer's lower-case names; io is saelens_folder.py):

    w_enc (C, F), b_enc (F,), w_dec (F, C), b_dec (C,)      C = d_in, F = d_sae

`sae_forward`/`sae_backward` are the pair training runs; `encode`/`decode` what using a trained
SAE needs. x feeds both the encoder and the loss's target: its gradient is the two summed, one
commented line in `sae_backward`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from glassformer.errors import GlassformerError
from glassformer.ops.linear import LinearCtx, linear_backward, linear_forward
from glassformer.ops.sae import (SAEEncodeCtx, SAELossCtx, sae_encode_backward,
                                 sae_encode_forward, sae_loss_backward, sae_loss_forward)
from glassformer.ops.sae_aux import AuxKCtx, topk_aux_backward, topk_aux_forward

ARCHITECTURES = ("relu", "topk")
# SAELens's name of each architecture in cfg.json
SAELENS_ARCHITECTURE = {"relu": "standard", "topk": "topk"}
# The encoder starts as the decoder's transpose at this norm (SAELens's decoder_init_norm)
ENCODER_INIT_NORM = 0.1


@dataclass(frozen=True)
class SAEConfig:
    d_in: int                 # C: width of the activations read (the model's d_model)
    d_sae: int                # F: number of features
    arch: str = "relu"        # "relu" (SAELens "standard", L1 penalty) or "topk"
    k: int | None = None      # TopK: features kept per row
    l1: float = 0.0           # ReLU: the L1 coefficient
    aux_k: float = 0.0        # TopK: the auxiliary loss's coefficient (SAELens's default: 1.0)

    def __post_init__(self):
        if self.arch not in ARCHITECTURES:
            raise GlassformerError(f"unknown SAE architecture {self.arch!r}; expected one of "
                                   f"{', '.join(ARCHITECTURES)}")
        if self.d_in < 1 or self.d_sae < 1:
            raise GlassformerError(f"an SAE needs d_in, d_sae >= 1, got {self.d_in}, "
                                   f"{self.d_sae}")
        if self.arch == "topk" and (self.k is None or not 1 <= self.k <= self.d_sae):
            raise GlassformerError(f"a TopK SAE needs 1 <= k <= d_sae ({self.d_sae}), got "
                                   f"k={self.k}")
        if self.l1 < 0 or self.aux_k < 0:
            raise GlassformerError(f"the L1 and AuxK coefficients must be >= 0, got {self.l1}, "
                                   f"{self.aux_k}")

    @property
    def top_k(self) -> int | None:
        """k for ops/sae.py's encoder: None for ReLU."""
        return self.k if self.arch == "topk" else None


class SAECtx(NamedTuple):
    encode: SAEEncodeCtx
    decode: LinearCtx
    loss: SAELossCtx
    aux: AuxKCtx


def sae_shapes(cfg: SAEConfig) -> dict[str, tuple[int, ...]]:
    return {"w_enc": (cfg.d_in, cfg.d_sae), "b_enc": (cfg.d_sae,),
            "w_dec": (cfg.d_sae, cfg.d_in), "b_dec": (cfg.d_in,)}


def init_sae(cfg: SAEConfig, rng: np.random.Generator, *, dtype=np.float32) -> dict:
    """Random unit-norm decoder rows; the encoder their transpose at norm 0.1 (SAELens's init);
    zero biases (training sets b_dec to the first batch's mean)."""
    w_dec = rng.standard_normal((cfg.d_sae, cfg.d_in))                     # (F, C)
    w_dec /= np.linalg.norm(w_dec, axis=-1, keepdims=True)
    return {"w_enc": (ENCODER_INIT_NORM * w_dec.T).astype(dtype),         # (C, F)
            "b_enc": np.zeros(cfg.d_sae, dtype=dtype),
            "w_dec": w_dec.astype(dtype),
            "b_dec": np.zeros(cfg.d_in, dtype=dtype)}


def encode(params: dict, x: np.ndarray, cfg: SAEConfig) -> np.ndarray:
    """Feature activations (N, F) of activations x (N, C)."""
    acts, _ = sae_encode_forward(x, params["w_enc"], params["b_enc"], params["b_dec"],
                                 k=cfg.top_k)
    return acts


def decode(params: dict, acts: np.ndarray) -> np.ndarray:
    """The reconstruction (N, C) of feature activations (N, F)."""
    out, _ = linear_forward(acts, params["w_dec"], params["b_dec"])
    return out


def sae_forward(params: dict, x: np.ndarray, cfg: SAEConfig, *, dead: np.ndarray | None = None
                ) -> tuple[float, np.ndarray, np.ndarray, SAECtx]:
    """One batch x (N, C) -> (loss, acts (N, F), out (N, C), ctx). dead (F,) bool: the features
    counted dead so far, which a TopK SAE's auxiliary loss reads (None: none)."""
    acts, enc_ctx = sae_encode_forward(x, params["w_enc"], params["b_enc"], params["b_dec"],
                                       k=cfg.top_k)                          # (N, C) -> (N, F)
    out, dec_ctx = linear_forward(acts, params["w_dec"], params["b_dec"])    # (N, F) -> (N, C)
    l1 = cfg.l1 if cfg.arch == "relu" else 0.0
    loss, loss_ctx = sae_loss_forward(x, out, acts, params["w_dec"], l1=l1)
    dead = np.zeros(cfg.d_sae, dtype=bool) if dead is None or cfg.arch != "topk" else dead
    aux, aux_ctx = topk_aux_forward(x, out, enc_ctx.pre, params["w_dec"], dead,
                                    coefficient=cfg.aux_k)
    return loss + aux, acts, out, SAECtx(enc_ctx, dec_ctx, loss_ctx, aux_ctx)


def sae_backward(ctx: SAECtx, dloss: float = 1.0) -> tuple[dict, np.ndarray]:
    """(grads under the params' names, dx) of the loss."""
    dx_target, dout, dacts_penalty, dw_dec_penalty = sae_loss_backward(dloss, ctx.loss)
    dacts_recon, dw_dec_recon, db_dec_out = linear_backward(dout, ctx.decode)
    dacts = dacts_recon + dacts_penalty           # acts feed the reconstruction and the penalty
    dpre_aux, dw_dec_aux = topk_aux_backward(dloss, ctx.aux)
    dx_enc, dw_enc, db_enc, db_dec_in = sae_encode_backward(dacts, ctx.encode,
                                                            dpre_direct=dpre_aux)
    dw_dec = dw_dec_recon + dw_dec_penalty        # W_dec: the decoder and the penalty
    if dw_dec_aux is not None:
        dw_dec = dw_dec + dw_dec_aux              # ... and the auxiliary reconstruction
    grads = {"w_enc": dw_enc, "b_enc": db_enc, "w_dec": dw_dec,
             "b_dec": db_dec_out + db_dec_in}           # b_dec: added at the output, taken at input
    return grads, dx_enc + dx_target                    # x: the encoder's input and the target
