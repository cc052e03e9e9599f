"""Small torch modules that mirror glassformer's blocks, for the float32 parity tests.

Written the way reference implementations write them, not the way ours are: nn.Linear layers
(weight (out, in) = our (in, out) weight transposed), K/V heads repeated per query head as HF's
`repeat_kv` does (our block broadcasts instead), RoPE from transformers' LlamaRotaryEmbedding and
apply_rotary_pos_emb when importable, masks and ALiBi as one additive float mask to
F.scaled_dot_product_attention, nn.LayerNorm, an RMSNorm written like HF's LlamaRMSNorm, and
F.gelu / F.relu / F.silu. Each mirror is built from our params dict and maps its gradients back
to our names, so a test compares two dicts with the same keys.
"""
from __future__ import annotations

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

# RoPE tables from transformers need a max position; the parity tests stay far below it.
_ROPE_MAX_POSITION = 64


class ParamMap:
    """Our param names -> (torch parameter, whether our layout is its transpose)."""

    def __init__(self):
        self.entries: dict[str, tuple[nn.Parameter, bool]] = {}

    def linear(self, params: dict, prefix: str, w_name: str, b_name: str | None) -> nn.Linear:
        """nn.Linear holding params[prefix + w_name] (in, out) as weight (out, in)."""
        w = params[prefix + w_name]
        b = params.get(prefix + b_name) if b_name else None
        layer = nn.Linear(w.shape[0], w.shape[1], bias=b is not None, dtype=torch.float32)
        with torch.no_grad():
            layer.weight.copy_(torch.tensor(w.T))
            self.entries[prefix + w_name] = (layer.weight, True)
            if b is not None:
                layer.bias.copy_(torch.tensor(b))
                self.entries[prefix + b_name] = (layer.bias, False)
        return layer

    def vector(self, params: dict, name: str) -> nn.Parameter:
        param = nn.Parameter(torch.tensor(params[name]))
        self.entries[name] = (param, False)
        return param

    def grads(self) -> dict[str, np.ndarray]:
        """Gradients in our names and layouts (after a backward)."""
        out = {}
        for name, (param, transposed) in self.entries.items():
            grad = param.grad.numpy()
            out[name] = grad.T if transposed else grad
        return out


def rope_cos_sin(positions: np.ndarray, d: int, theta: float) -> tuple[torch.Tensor, ...]:
    """(B or 1, T, D) cos and sin at the given (T,) or (B, T) positions."""
    position_ids = torch.tensor(np.atleast_2d(positions))                # (B or 1, T)
    try:
        from transformers import LlamaConfig
        from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding
    except ImportError:
        inv_freq = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.float32) / d))
        freqs = position_ids[..., None].float() * inv_freq               # (.., T, D/2)
        angles = torch.cat((freqs, freqs), dim=-1)                       # (.., T, D)
        return angles.cos(), angles.sin()
    config = LlamaConfig(hidden_size=2 * d, num_attention_heads=2, rope_theta=theta,
                         max_position_embeddings=_ROPE_MAX_POSITION)
    return LlamaRotaryEmbedding(config)(torch.zeros(1), position_ids)


def apply_rope(q, k, cos, sin):
    try:
        from transformers.models.llama.modeling_llama import apply_rotary_pos_emb
    except ImportError:
        def rotate_half(x):
            x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
            return torch.cat((-x2, x1), dim=-1)
        cos, sin = cos[:, None], sin[:, None]                            # broadcast over heads
        return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
    return apply_rotary_pos_emb(q, k, cos, sin)


def alibi(n_head: int, t: int, s: int) -> torch.Tensor:
    """(H, T, S) ALiBi bias -m_h * distance, slopes 2^(-8 h / H) (H a power of two)."""
    assert n_head & (n_head - 1) == 0, "this mirror only knows power-of-two head counts"
    slopes = 2.0 ** (-8.0 * torch.arange(1, n_head + 1, dtype=torch.float32) / n_head)
    query_pos = torch.arange(t)[:, None] + (s - t)
    distance = (torch.arange(s)[None, :] - query_pos).float()           # (T, S), <= 0 if visible
    return slopes[:, None, None] * distance


class TorchAttention(nn.Module):
    def __init__(self, params: dict, cfg, pmap: ParamMap, prefix: str):
        super().__init__()
        self.cfg = cfg
        self.q_proj = pmap.linear(params, prefix, "wq", "bq")
        self.k_proj = pmap.linear(params, prefix, "wk", "bk")
        self.v_proj = pmap.linear(params, prefix, "wv", "bv")
        self.o_proj = pmap.linear(params, prefix, "wo", "bo")

    def forward(self, x, *, causal, memory=None, key_mask=None, positions=None):
        cfg = self.cfg
        h, kv, d = cfg.n_head, cfg.kv_heads, cfg.dim_per_head
        src = x if memory is None else memory
        b, t, _ = x.shape
        s = src.shape[1]
        q = self.q_proj(x).view(b, t, h, d).transpose(1, 2)
        k = self.k_proj(src).view(b, s, kv, d).transpose(1, 2)
        v = self.v_proj(src).view(b, s, kv, d).transpose(1, 2)
        if cfg.position == "rope":
            pos = np.arange(t) if positions is None else positions
            cos, sin = rope_cos_sin(pos, d, cfg.rope_theta)
            q, k = apply_rope(q, k, cos, sin)
        k = k.repeat_interleave(h // kv, dim=1)      # HF repeat_kv: a copy per query head
        v = v.repeat_interleave(h // kv, dim=1)
        allowed = torch.ones(t, s, dtype=torch.bool)
        if causal:
            allowed = torch.ones(t, s, dtype=torch.bool).tril(diagonal=s - t)
        if key_mask is not None:
            allowed = allowed & torch.tensor(key_mask)[:, None, None, :]   # (B, 1, T, S)
        float_mask = torch.zeros(allowed.shape).masked_fill(~allowed, float("-inf"))
        if cfg.position == "alibi":
            float_mask = float_mask + alibi(h, t, s)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=float_mask)
        return self.o_proj(out.transpose(1, 2).reshape(b, t, h * d))


class RMSNorm(nn.Module):
    """As HF's LlamaRMSNorm: x / sqrt(mean(x^2) + eps) * w."""

    def __init__(self, weight: nn.Parameter, eps: float):
        super().__init__()
        self.weight = weight
        self.eps = eps

    def forward(self, x):
        variance = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(variance + self.eps))


def make_norm(params: dict, cfg, pmap: ParamMap, prefix: str) -> nn.Module:
    if cfg.norm == "rms":
        return RMSNorm(pmap.vector(params, prefix + "w"), cfg.norm_eps)
    has_bias = prefix + "b" in params
    norm = nn.LayerNorm(cfg.d_model, eps=cfg.norm_eps, bias=has_bias)
    norm.weight = pmap.vector(params, prefix + "w")
    if has_bias:
        norm.bias = pmap.vector(params, prefix + "b")
    return norm


class TorchMLP(nn.Module):
    def __init__(self, params: dict, cfg, pmap: ParamMap, prefix: str):
        super().__init__()
        self.kind = cfg.mlp
        self.up = pmap.linear(params, prefix, "w_up", "b_up")
        self.gate = pmap.linear(params, prefix, "w_gate", None) if self.kind == "swiglu" else None
        self.down = pmap.linear(params, prefix, "w_down", "b_down")

    def forward(self, x):
        if self.kind == "swiglu":
            hidden = F.silu(self.gate(x)) * self.up(x)
        elif self.kind == "relu":
            hidden = F.relu(self.up(x))
        elif self.kind == "silu":
            hidden = F.silu(self.up(x))
        else:
            hidden = F.gelu(self.up(x), approximate="tanh" if self.kind == "gelu_tanh" else "none")
        return self.down(hidden)


class TorchBlock(nn.Module):
    """Pre-norm: x + f(norm(x)); post-norm: norm(x + f(x)); optional cross-attention."""

    def __init__(self, params: dict, cfg, pmap: ParamMap, cross: bool):
        super().__init__()
        self.pre = cfg.norm_position == "pre"
        self.norm1 = make_norm(params, cfg, pmap, "norm1.")
        self.attn = TorchAttention(params, cfg, pmap, "attn.")
        self.cross = TorchAttention(params, cfg, pmap, "cross.") if cross else None
        self.norm_cross = make_norm(params, cfg, pmap, "norm_cross.") if cross else None
        self.norm2 = make_norm(params, cfg, pmap, "norm2.")
        self.mlp = TorchMLP(params, cfg, pmap, "mlp.")

    def _residual(self, x, norm, body):
        if self.pre:
            return x + body(norm(x))
        return norm(x + body(x))

    def forward(self, x, *, causal, key_mask=None, positions=None, memory=None,
                memory_mask=None):
        x = self._residual(x, self.norm1, lambda h: self.attn(
            h, causal=causal, key_mask=key_mask, positions=positions))
        if self.cross is not None:
            x = self._residual(x, self.norm_cross, lambda h: self.cross(
                h, causal=False, memory=memory, key_mask=memory_mask))
        return self._residual(x, self.norm2, self.mlp)


def run(module: nn.Module, pmap: ParamMap, inputs: dict, dout: np.ndarray, **kwargs):
    """Forward on float32 tensors made from `inputs` (x, memory), backward with `dout`.

    Returns (out, grads): grads has our param names plus "x" (and "memory")."""
    tensors = {name: torch.tensor(a, requires_grad=True) for name, a in inputs.items()}
    out = module(tensors["x"], **{**kwargs, **{k: v for k, v in tensors.items() if k != "x"}})
    out.backward(torch.tensor(dout))
    grads = pmap.grads()
    for name, tensor in tensors.items():
        grads[name] = tensor.grad.numpy()
    return out.detach().numpy(), grads


# float32 parity: both sides round at ~6e-8 per operation, in different orders (our broadcast GQA
# vs repeated heads, our matmul vs torch's fused kernels); a block chains ~10 ops, and the observed
# differences stay below ~1e-6 of the largest entry, so 1e-5 passes a right block and fails a
# wrong one by orders of magnitude.
TORCH_RTOL = 1e-5
# Near-zero entries carry no relative precision: the absolute floor is TORCH_RTOL times the
# array's largest entry (as in tests/ops).
# note: the key bias gradient is zero in exact arithmetic without RoPE (q . bk is the same for
# every key of a row and softmax ignores a constant row shift), so both sides return rounding
# noise: it is compared absolutely, against the largest gradient anywhere in the block.
KEY_BIAS_ATOL_FRACTION = 1e-5


def assert_close(ours: np.ndarray, ref: np.ndarray, name: str = "") -> None:
    np.testing.assert_allclose(ours, ref, rtol=TORCH_RTOL,
                               atol=TORCH_RTOL * float(np.abs(ref).max()), err_msg=name)


def assert_grads_match(ours: dict, theirs: dict, *, key_bias_is_zero: bool) -> None:
    """Same keys, and every gradient close; key biases absolutely when they must be zero."""
    assert sorted(ours) == sorted(theirs)
    largest = max(float(np.abs(g).max()) for g in theirs.values())
    for name, ref in theirs.items():
        if key_bias_is_zero and name.endswith("bk"):
            floor = KEY_BIAS_ATOL_FRACTION * largest
            assert float(np.abs(ours[name]).max()) <= floor, name
            assert float(np.abs(ref).max()) <= floor, name
        else:
            assert_close(ours[name], ref, name)
