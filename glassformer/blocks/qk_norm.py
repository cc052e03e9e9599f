"""QK-norm: an RMSNorm on the queries and on the keys, right after their projections and before
RoPE (Dehghani et al. 2023, "Scaling Vision Transformers to 22 Billion Parameters"; Qwen3,
OLMoE). It bounds q . k, so attention logits cannot grow without limit as training goes on.

    "head" (Qwen3)  over each head's D:  q (B, H, T, D), k (B, K, S, D); q_norm, k_norm (D,),
                    one scale shared by every head
    "proj" (OLMoE)  over the whole projection:  q (B, T, H*D), k (B, S, K*D);
                    q_norm (H*D,), k_norm (K*D,)

The norm's math is ops/rms_norm.py's (eps = cfg.norm_eps, as HF's Qwen3RMSNorm / OlmoeRMSNorm):
this block only names the two params and keeps the two ctxs. blocks/attention.py calls it before
or after splitting the heads, as the kind asks. Derivation: docs/derivations/rms_norm.md.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from glassformer.blocks.config import BlockConfig
from glassformer.blocks.norm import norm_gain
from glassformer.ops.rms_norm import RMSNormCtx, rms_norm_backward, rms_norm_forward


class QKNormCtx(NamedTuple):
    kind: str           # "head" or "proj"
    q: RMSNormCtx       # on q, (B, H, T, D) or (B, T, H*D)
    k: RMSNormCtx       # on k, (B, K, S, D) or (B, S, K*D)


def qk_norm_forward(params: dict, q: np.ndarray, k: np.ndarray, cfg: BlockConfig
                    ) -> tuple[np.ndarray, np.ndarray, QKNormCtx]:
    """RMSNorm over the last axis of q and of k, scaled by params q_norm and k_norm."""
    q, q_ctx = rms_norm_forward(q, norm_gain(params["q_norm"], cfg), eps=cfg.norm_eps)
    k, k_ctx = rms_norm_forward(k, norm_gain(params["k_norm"], cfg), eps=cfg.norm_eps)
    return q, k, QKNormCtx(cfg.qk_norm, q_ctx, k_ctx)


def qk_norm_backward(dq: np.ndarray, dk: np.ndarray, ctx: QKNormCtx
                     ) -> tuple[np.ndarray, np.ndarray, dict]:
    """(dq, dk) in the forward's shapes -> (dq, dk, {"q_norm": ..., "k_norm": ...})."""
    dq, dq_norm = rms_norm_backward(dq, ctx.q)
    dk, dk_norm = rms_norm_backward(dk, ctx.k)
    return dq, dk, {"q_norm": dq_norm, "k_norm": dk_norm}


def qk_norm_shapes(cfg: BlockConfig) -> dict[str, tuple[int, ...]]:
    """q_norm and k_norm's shapes ({} without QK-norm)."""
    d = cfg.dim_per_head
    if cfg.qk_norm == "head":
        return {"q_norm": (d,), "k_norm": (d,)}                             # (D,), (D,)
    if cfg.qk_norm == "proj":
        return {"q_norm": (cfg.n_head * d,), "k_norm": (cfg.kv_heads * d,)}  # (H*D,), (K*D,)
    return {}
