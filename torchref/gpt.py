"""A nanoGPT-style GPT in PyTorch that takes glassformer's params dict (tests and bench only).

Same architecture as glassformer.models.gpt2: pre-LN blocks, fused q/k/v projection, causal
scaled_dot_product_attention, tanh GELU MLP, tied or untied head. Weights are copied from our
(in, out) layout into nn.Linear's (out, in); gradients are mapped back to our names.
"""
from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F


class Block(nn.Module):
    def __init__(self, c: int, n_head: int, f: int, bias: bool, eps: float, act: str):
        super().__init__()
        self.n_head = n_head
        self.ln_1 = nn.LayerNorm(c, eps=eps, bias=bias)
        self.c_attn = nn.Linear(c, 3 * c, bias=bias)
        self.c_proj = nn.Linear(c, c, bias=bias)
        self.ln_2 = nn.LayerNorm(c, eps=eps, bias=bias)
        self.c_fc = nn.Linear(c, f, bias=bias)
        self.mlp_proj = nn.Linear(f, c, bias=bias)
        self.approximate = "tanh" if act == "gelu_tanh" else "none"

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(self.ln_1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.c_proj(y.transpose(1, 2).reshape(b, t, c))
        h = F.gelu(self.c_fc(self.ln_2(x)), approximate=self.approximate)
        return x + self.mlp_proj(h)


class TorchGPT(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        f = cfg.d_ff or 4 * cfg.d_model
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.wpe = nn.Embedding(cfg.max_seq_len, cfg.d_model)
        self.blocks = nn.ModuleList(Block(cfg.d_model, cfg.n_head, f, cfg.bias, cfg.norm_eps,
                                          cfg.activation) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.d_model, eps=cfg.norm_eps, bias=cfg.bias)
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.lm_head.weight = self.wte.weight

    def forward(self, ids, targets=None):
        t = ids.shape[1]
        x = self.wte(ids) + self.wpe(torch.arange(t))
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        if targets is None:
            return logits, None
        return logits, F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def _mapping(cfg):
    """(our name, torch name, how): how is 'T' (transpose), '' (as is) or a qkv slice."""
    rows = [("tok_emb", "wte.weight", ""), ("pos_emb", "wpe.weight", ""),
            ("norm_f.w", "ln_f.weight", "")]
    if cfg.bias:
        rows.append(("norm_f.b", "ln_f.bias", ""))
    if not cfg.tie_embeddings:
        rows.append(("lm_head", "lm_head.weight", "T"))
    for i in range(cfg.n_layer):
        p, t = f"blocks.{i}.", f"blocks.{i}."
        rows += [(p + "norm1.w", t + "ln_1.weight", ""), (p + "norm2.w", t + "ln_2.weight", ""),
                 (p + "attn.wq", t + "c_attn.weight", "T0"), (p + "attn.wk", t + "c_attn.weight", "T1"),
                 (p + "attn.wv", t + "c_attn.weight", "T2"), (p + "attn.wo", t + "c_proj.weight", "T"),
                 (p + "mlp.w_up", t + "c_fc.weight", "T"), (p + "mlp.w_down", t + "mlp_proj.weight", "T")]
        if cfg.bias:
            rows += [(p + "norm1.b", t + "ln_1.bias", ""), (p + "norm2.b", t + "ln_2.bias", ""),
                     (p + "attn.bq", t + "c_attn.bias", "0"), (p + "attn.bk", t + "c_attn.bias", "1"),
                     (p + "attn.bv", t + "c_attn.bias", "2"), (p + "attn.bo", t + "c_proj.bias", ""),
                     (p + "mlp.b_up", t + "c_fc.bias", ""), (p + "mlp.b_down", t + "mlp_proj.bias", "")]
    return rows


def _pick(tensor, how, c):
    if how.startswith("T"):
        tensor = tensor.T
        how = how[1:]
        if how:
            return tensor[:, int(how) * c:(int(how) + 1) * c]
        return tensor
    if how:
        return tensor[int(how) * c:(int(how) + 1) * c]
    return tensor


def build(cfg, params: dict, dtype=torch.float32) -> TorchGPT:
    """A TorchGPT holding a copy of glassformer's params."""
    model = TorchGPT(cfg).to(dtype)
    state = model.state_dict()
    with torch.no_grad():
        for ours, theirs, how in _mapping(cfg):
            _pick(state[theirs], how, cfg.d_model).copy_(torch.from_numpy(np.asarray(params[ours])))
    return model


def grads_as_ours(cfg, model: TorchGPT) -> dict:
    """The model's .grad tensors under glassformer's names and layout."""
    named = dict(model.named_parameters(remove_duplicate=False))
    return {ours: _pick(named[theirs].grad, how, cfg.d_model).detach().numpy().copy()
            for ours, theirs, how in _mapping(cfg)}
