"""QK-norm in the attention block: per head (Qwen3) and over the whole projection (OLMoE).
Float64 gradcheck (the attention_block qk-norm cases), float32 parity of the forward and every
gradient with transformers' own Qwen3Attention and OlmoeAttention (GQA, RoPE, causal), the
shapes it adds, and KV-cached decoding equal to the full forward."""
from __future__ import annotations

import numpy as np
import pytest

from glassformer.blocks.attention import (attention_block_backward, attention_block_forward,
                                          attention_shapes, init_attention)
from glassformer.blocks.config import BlockConfig
from glassformer.blocks.kv_cache import KVCache, KVLayout
from glassformer.errors import GlassformerError
from glassformer.gradcheck import run_case
from glassformer.gradcheck.cases._block_params import exercised
from glassformer.gradcheck.cases.attention_block import CASES

GRADCHECK_TOL = 1e-6
# float32 against torch float32, ~10 ops deep in different orders: observed ~1e-6.
TORCH_RTOL = 1e-5
# cached decoding sums the same products in another grouping: float32 rounding only.
CACHE_ATOL = 1e-5
QK_CASES = [case for case in CASES if case.mode.startswith("qk-norm")]


@pytest.mark.parametrize("case", QK_CASES, ids=lambda c: c.mode)
def test_gradcheck(case):
    result = run_case(case)
    assert result.max_rel_err < GRADCHECK_TOL, result.per_input


def _cfg(kind: str, head_dim=None) -> BlockConfig:
    return BlockConfig(d_model=16, n_head=4, n_kv_head=2, head_dim=head_dim, norm="rms",
                       norm_eps=1e-6, mlp="swiglu", qkv_bias=False, out_bias=False,
                       mlp_bias=False, position="rope", qk_norm=kind)


def _params(cfg, seed=0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    params = init_attention(cfg, rng, std=0.3, out_std=0.3, dtype=np.float64)
    return {n: p.astype(dtype) for n, p in exercised(params, rng).items()}


def test_shapes():
    assert attention_shapes(_cfg("head", head_dim=6))["q_norm"] == (6,)
    proj = attention_shapes(_cfg("proj"))
    assert proj["q_norm"] == (16,) and proj["k_norm"] == (8,)
    with pytest.raises(GlassformerError, match="qk_norm must be one of"):
        _cfg("layer")


@pytest.mark.parametrize("kind", ["head", "proj"])
def test_cached_decoding_equals_the_full_forward(kind):
    cfg = _cfg(kind)
    params = _params(cfg)
    x = np.random.default_rng(1).standard_normal((2, 5, 16)).astype(np.float32)
    full, _ = attention_block_forward(params, x, cfg, causal=True)
    cache = KVCache.allocate(KVLayout(2, 4, 4), n_layer=1, batch=2, max_len=8)
    prompt, _ = attention_block_forward(params, x[:, :2], cfg, causal=True, kv_cache=cache)
    cache.advance(2)
    steps = [prompt]
    for i in range(2, 5):  # one token at a time: the three-product path, not the joined one
        y, _ = attention_block_forward(params, x[:, i:i + 1], cfg, causal=True, kv_cache=cache)
        cache.advance(1)
        steps.append(y)
    np.testing.assert_allclose(np.concatenate(steps, axis=1), full, atol=CACHE_ATOL)


torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


def _hf_attention(kind, cfg):
    common = dict(hidden_size=cfg.d_model, num_attention_heads=cfg.n_head,
                  num_key_value_heads=cfg.kv_heads, rms_norm_eps=cfg.norm_eps,
                  attention_bias=False)
    if kind == "head":
        config = transformers.Qwen3Config(head_dim=cfg.dim_per_head, **common)
        module = transformers.models.qwen3.modeling_qwen3
        attention = module.Qwen3Attention(config, 0)
        rotary = module.Qwen3RotaryEmbedding(config)
    else:
        config = transformers.OlmoeConfig(**common)
        module = transformers.models.olmoe.modeling_olmoe
        attention = module.OlmoeAttention(config, 0)
        rotary = module.OlmoeRotaryEmbedding(config)
    config._attn_implementation = "eager"
    return attention, rotary


@pytest.mark.parametrize("kind,head_dim", [("head", None), ("head", 5 * 2), ("proj", None)])
def test_matches_transformers_attention(kind, head_dim):
    cfg = _cfg(kind, head_dim)
    params = _params(cfg, seed=2)
    b, t = 2, 6
    x = np.random.default_rng(3).standard_normal((b, t, 16)).astype(np.float32)
    y, ctx = attention_block_forward(params, x, cfg, causal=True)
    dy = np.random.default_rng(4).standard_normal(y.shape).astype(np.float32)
    grads, dx, _ = attention_block_backward(dy, ctx)

    attention, rotary = _hf_attention(kind, cfg)
    names = {"wq": "q_proj.weight", "wk": "k_proj.weight", "wv": "v_proj.weight",
             "wo": "o_proj.weight", "q_norm": "q_norm.weight", "k_norm": "k_norm.weight"}
    with torch.no_grad():
        for ours, theirs in names.items():
            value = params[ours].T if ours.startswith("w") else params[ours]
            attention.get_parameter(theirs).copy_(torch.tensor(value))
    x_t = torch.tensor(x, requires_grad=True)
    position_ids = torch.arange(t)[None]
    cos_sin = rotary(x_t, position_ids)
    mask = torch.full((t, t), float("-inf")).triu(1)[None, None]         # (1, 1, T, T)
    y_t, _ = attention(x_t, cos_sin, mask)
    y_t.backward(torch.tensor(dy))
    np.testing.assert_allclose(y, y_t.detach().numpy(), rtol=TORCH_RTOL,
                               atol=TORCH_RTOL * float(np.abs(y).max()))
    theirs = {ours: attention.get_parameter(name).grad.numpy() for ours, name in names.items()}
    theirs = {n: (g.T if n.startswith("w") else g) for n, g in theirs.items()}
    assert sorted(grads) == sorted(theirs)
    for name, ref in {**theirs, "x": x_t.grad.numpy()}.items():
        ours = dx if name == "x" else grads[name]
        np.testing.assert_allclose(ours, ref, rtol=TORCH_RTOL,
                                   atol=TORCH_RTOL * float(np.abs(ref).max()), err_msg=name)
