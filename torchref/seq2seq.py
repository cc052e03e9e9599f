"""The encoder-decoder of glassformer.models.seq2seq written with torch ops, for autograd parity
(tests only). It reads glassformer's params dict as torch leaf tensors under the same names and
(in, out) layout, so `.grad` of each leaf is directly comparable with glassformer's grads.
Every flag of Seq2SeqConfig is followed: pre/post-norm, [sin | cos] or learned positions at an
offset, sqrt(C) scaling, embedding LayerNorm, shared/separate source embedding, tied head,
logits bias; the source padding mask; causal decoder self-attention; cross-attention.
"""
from __future__ import annotations

import math

import numpy as np
import torch
from torch.nn import functional as F


def leaves(params: dict, dtype=torch.float64) -> dict:
    """glassformer params -> torch leaf tensors that require grad, same names."""
    return {name: torch.tensor(np.asarray(value), dtype=dtype, requires_grad=True)
            for name, value in params.items()}


def _norm(p, prefix, x, eps):
    return F.layer_norm(x, x.shape[-1:], p[prefix + "w"], p.get(prefix + "b"), eps)


def _attention(p, prefix, x, source, n_head, allowed):
    """allowed: bool (B or 1, 1, T, S), True where a query may read a key."""
    b, t, c = x.shape
    s = source.shape[1]
    d = c // n_head
    q = (x @ p[prefix + "wq"] + p[prefix + "bq"]).view(b, t, n_head, d).transpose(1, 2)
    k = (source @ p[prefix + "wk"] + p[prefix + "bk"]).view(b, s, n_head, d).transpose(1, 2)
    v = (source @ p[prefix + "wv"] + p[prefix + "bv"]).view(b, s, n_head, d).transpose(1, 2)
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(d)
    scores = scores.masked_fill(~allowed, float("-inf"))
    out = torch.softmax(scores, dim=-1) @ v                        # (B, H, T, D)
    return out.transpose(1, 2).reshape(b, t, c) @ p[prefix + "wo"] + p[prefix + "bo"]


def _mlp(p, prefix, x, act):
    h = x @ p[prefix + "w_up"] + p[prefix + "b_up"]
    if act in ("relu", "silu"):
        h = F.relu(h) if act == "relu" else F.silu(h)
    else:
        h = F.gelu(h, approximate="tanh" if act == "gelu_tanh" else "none")
    return h @ p[prefix + "w_down"] + p[prefix + "b_down"]


def _sub(p, cfg, name, x, body):
    """One residual sub-block in cfg's norm position."""
    if cfg.norm_position == "pre":
        return x + body(_norm(p, name, x, cfg.norm_eps))
    return _norm(p, name, x + body(x), cfg.norm_eps)


def _layer(p, cfg, prefix, x, self_allowed, memory=None, cross_allowed=None):
    x = _sub(p, cfg, prefix + "norm1.", x,
             lambda h: _attention(p, prefix + "attn.", h, h, cfg.n_head, self_allowed))
    if memory is not None:
        x = _sub(p, cfg, prefix + "norm_cross.", x,
                 lambda h: _attention(p, prefix + "cross.", h, memory, cfg.n_head, cross_allowed))
    return _sub(p, cfg, prefix + "norm2.", x,
                lambda h: _mlp(p, prefix + "mlp.", h, cfg.activation))


def _embed(p, cfg, side, ids):
    table = p["enc.tok_emb"] if side == "enc" and not cfg.share_embeddings else p["tok_emb"]
    t, c = ids.shape[1], cfg.d_model
    x = table[ids] * (math.sqrt(c) if cfg.scale_embedding else 1.0)
    if cfg.positions == "learned":
        x = x + p[f"{side}.pos_emb"][torch.arange(t) + cfg.pos_offset]
    else:
        pos = torch.arange(t, dtype=torch.float64)[:, None]
        inv = 1.0 / (10000.0 ** (torch.arange(0, c, 2, dtype=torch.float64) / c))
        x = x + torch.cat([torch.sin(pos * inv), torch.cos(pos * inv)], dim=1).to(x.dtype)
    if cfg.emb_norm:
        x = _norm(p, f"{side}.emb_norm.", x, cfg.norm_eps)
    return x


def forward(p: dict, cfg, src_ids, tgt_ids, src_mask):
    """logits (B, T, V) for numpy ids and a (B, S) bool numpy mask."""
    src, tgt = torch.from_numpy(src_ids), torch.from_numpy(tgt_ids)
    keys = torch.from_numpy(src_mask)[:, None, None, :]                 # (B, 1, 1, S)
    x = _embed(p, cfg, "enc", src)
    for i in range(cfg.n_layer):
        x = _layer(p, cfg, f"enc.blocks.{i}.", x, keys)
    if cfg.norm_position == "pre":
        x = _norm(p, "enc.norm_f.", x, cfg.norm_eps)
    t = tgt.shape[1]
    causal = torch.ones(t, t, dtype=torch.bool).tril()[None, None]       # (1, 1, T, T)
    h = _embed(p, cfg, "dec", tgt)
    for i in range(cfg.decoder_layers):
        h = _layer(p, cfg, f"dec.blocks.{i}.", h, causal, memory=x, cross_allowed=keys)
    if cfg.norm_position == "pre":
        h = _norm(p, "dec.norm_f.", h, cfg.norm_eps)
    logits = h @ (p["tok_emb"].T if cfg.tie_embeddings else p["lm_head"])
    return logits + p["logits_bias"] if cfg.logits_bias else logits
