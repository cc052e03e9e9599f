"""Multi-head latent attention: float64 gradcheck of every mode, parity (forward and every
gradient) with transformers' DeepseekV3Attention under torch autograd, dtypes, the latent cache
(decoding with it equals decoding without it), its bytes per token, bad input."""
from __future__ import annotations

import math

import numpy as np
import pytest

from glassformer.blocks.config import BlockConfig, MLAConfig
from glassformer.blocks.kv_cache import KVCache, KVLayout
from glassformer.blocks.mla import (init_mla, latent_cache, mla_block_backward,
                                    mla_block_forward, mla_latent, mla_shapes)
from glassformer.errors import GlassformerError
from glassformer.gradcheck import run_case
from glassformer.gradcheck.cases._block_params import exercised
from glassformer.gradcheck.cases.mla import CASES, mla_config

# Finite differences in float64 agree to ~1e-9 when the backward is right.
GRADCHECK_TOL = 1e-6
# The brief's bound for float32 against torch autograd (relative to each array's largest entry).
TORCH_TOL = 1e-5
# Cached decoding: the same sums grouped otherwise; float64 ~1e-15, float32 ~1e-7.
CACHE_ATOL = {np.float64: 1e-12, np.float32: 1e-5}


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.mode)
def test_gradcheck(case):
    result = run_case(case)
    assert result.max_rel_err < GRADCHECK_TOL, result.per_input


def _setup(dtype, *, b=2, t=5, seed=0, **cfg_kwargs):
    cfg = mla_config(**cfg_kwargs)
    rng = np.random.default_rng(seed)
    std = 1.0 / math.sqrt(cfg.d_model)
    params = init_mla(cfg, rng, std=std, out_std=std, dtype=np.float64)
    params = {name: p.astype(dtype) for name, p in exercised(params, rng).items()}
    x = rng.standard_normal((b, t, cfg.d_model)).astype(dtype)
    return cfg, params, x


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_dtype_is_kept_and_every_param_gets_a_gradient(dtype):
    cfg, params, x = _setup(dtype, interleave=True, yarn=True)
    y, ctx = mla_block_forward(params, x, cfg)
    grads, dx = mla_block_backward(np.ones_like(y), ctx)
    assert y.dtype == dx.dtype == dtype
    assert sorted(grads) == sorted(params) == sorted(mla_shapes(cfg))
    assert all(grads[n].shape == params[n].shape and grads[n].dtype == dtype for n in params)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("cfg_kwargs", [{}, {"q_lora_rank": None, "interleave": True,
                                             "yarn": True}], ids=["q-lora", "plain-interleave"])
def test_cached_decoding_matches_a_full_forward(dtype, cfg_kwargs):
    """A 3-token prefill then two 1-token steps through the latent cache equal one forward."""
    cfg, params, x = _setup(dtype, **cfg_kwargs)
    full, _ = mla_block_forward(params, x, cfg)
    cache = latent_cache(cfg, n_layer=1, batch=2, max_len=6, dtype=dtype)
    pieces = []
    for start, end in ((0, 3), (3, 4), (4, 5)):
        y, ctx = mla_block_forward(params, x[:, start:end], cfg, kv_cache=cache)
        cache.advance(end - start)
        pieces.append(y)
    np.testing.assert_allclose(np.concatenate(pieces, axis=1), full, rtol=0,
                               atol=CACHE_ATOL[dtype])
    # the cache holds the normalised latent (what wkv_b read) and nothing per head
    _, full_ctx = mla_block_forward(params, x, cfg)
    np.testing.assert_allclose(cache.k[0][:, 0, :5], mla_latent(full_ctx),
                               atol=CACHE_ATOL[dtype])
    with pytest.raises(GlassformerError, match="inference only"):
        mla_block_backward(np.ones_like(y), ctx)


def test_latent_cache_bytes_per_token():
    """(R + Dr) floats per token and layer, against 2 H (Dn+Dr) for MHA of the same heads."""
    cfg = mla_config()
    cache = latent_cache(cfg, n_layer=3, batch=2, max_len=8)
    mla = cfg.mla
    assert cache.nbytes_per_token() == 3 * 4 * (mla.kv_lora_rank + mla.qk_rope_head_dim)
    assert cache.k[0].shape == (2, 1, 8, mla.kv_lora_rank)
    assert cache.v[0].shape == (2, 1, 8, mla.qk_rope_head_dim)
    mha = KVCache.allocate(KVLayout(cfg.n_head, 7, 7), n_layer=3, batch=2, max_len=8)
    assert mha.nbytes_per_token() == 3 * 4 * 2 * cfg.n_head * 7


def test_bad_input_is_one_line():
    with pytest.raises(GlassformerError, match="qk_rope_head_dim"):
        MLAConfig(kv_lora_rank=4, qk_nope_head_dim=2, qk_rope_head_dim=3, v_head_dim=2)
    with pytest.raises(GlassformerError, match="kv_lora_rank must be an integer >= 1"):
        MLAConfig(kv_lora_rank=0, qk_nope_head_dim=2, qk_rope_head_dim=2, v_head_dim=2)
    mla = MLAConfig(kv_lora_rank=4, qk_nope_head_dim=2, qk_rope_head_dim=2, v_head_dim=2)
    with pytest.raises(GlassformerError, match="RoPE width"):
        BlockConfig(d_model=8, n_head=2, position="rope", mla=mla)
    cfg, params, _ = _setup(np.float32)
    with pytest.raises(GlassformerError, match=r"C=8"):
        mla_block_forward(params, np.zeros((1, 2, 6), np.float32), cfg)


# ---------------------------------------------------------------- against transformers

torch = pytest.importorskip("torch")
# the reference pinned: DeepseekV3 with rope_parameters and experts_implementation (5.x)
transformers = pytest.importorskip("transformers", minversion="5.24")
from transformers import DeepseekV3Config  # noqa: E402
from transformers.models.deepseek_v3 import modeling_deepseek_v3 as hf_ds  # noqa: E402

# our name -> HF module (weights transposed: nn.Linear stores (out, in))
HF_NAMES = {"wq": "q_proj", "wq_a": "q_a_proj", "q_norm.w": "q_a_layernorm",
            "wq_b": "q_b_proj", "wkv_a": "kv_a_proj_with_mqa", "kv_norm.w": "kv_a_layernorm",
            "wkv_b": "kv_b_proj", "wo": "o_proj"}


def _hf_attention(cfg: BlockConfig, params: dict):
    mla = cfg.mla
    rope = {"rope_type": "default", "rope_theta": cfg.rope_theta}
    if cfg.rope_scaling is not None:
        scaling = cfg.rope_scaling
        rope = {"rope_type": "yarn", "rope_theta": cfg.rope_theta, "factor": scaling.factor,
                "original_max_position_embeddings": scaling.original_max_len,
                "mscale_all_dim": mla.mscale_all_dim}
    hf_cfg = DeepseekV3Config(
        hidden_size=cfg.d_model, num_attention_heads=cfg.n_head, num_key_value_heads=cfg.n_head,
        q_lora_rank=mla.q_lora_rank, kv_lora_rank=mla.kv_lora_rank,
        qk_nope_head_dim=mla.qk_nope_head_dim, qk_rope_head_dim=mla.qk_rope_head_dim,
        v_head_dim=mla.v_head_dim, rope_interleave=mla.rope_interleave, rope_parameters=rope,
        max_position_embeddings=64, rms_norm_eps=0.5, attn_implementation="eager")
    module = hf_ds.DeepseekV3Attention(hf_cfg, layer_idx=0).float()
    with torch.no_grad():
        for name, value in params.items():
            target = getattr(module, HF_NAMES[name]).weight
            target.copy_(torch.tensor(value if value.ndim == 1 else value.T))
    return module, hf_ds.DeepseekV3RotaryEmbedding(hf_cfg)


def _additive_mask(b: int, t: int, mask: np.ndarray | None) -> torch.Tensor:
    allowed = np.tril(np.ones((t, t), bool))[None, None]              # (1, 1, T, T)
    if mask is not None:
        allowed = allowed & mask[:, None, None, :]                    # (B, 1, T, T)
    allowed = np.broadcast_to(allowed, (b, 1, t, t))
    return torch.tensor(np.where(allowed, 0.0, np.finfo(np.float32).min), dtype=torch.float32)


PARITY = {"q-lora": ({}, None, None),
          "plain-q": ({"q_lora_rank": None}, None, None),
          "interleave-yarn": ({"interleave": True, "yarn": True}, None, None),
          "padding-per-row": ({}, np.array([[True] * 5, [False, True, True, True, True]]),
                              np.array([[0, 1, 2, 3, 4], [0, 0, 1, 2, 3]]))}


@pytest.mark.parametrize("mode", PARITY)
def test_matches_transformers_deepseek_v3_attention(mode):
    cfg_kwargs, mask, positions = PARITY[mode]
    cfg, params, x = _setup(np.float32, **cfg_kwargs)
    b, t = x.shape[:2]
    positions = np.arange(t) if positions is None else positions
    y, ctx = mla_block_forward(params, x, cfg, key_mask=mask, positions=positions)
    dy = np.random.default_rng(7).standard_normal(y.shape).astype(np.float32)
    real = np.ones((b, t), bool) if mask is None else mask
    # a padding query sees no key: ours outputs 0, HF a mean over masked keys; neither counts
    dy = dy * real[..., None]
    grads, dx = mla_block_backward(dy, ctx)

    module, rotary = _hf_attention(cfg, params)
    x_t = torch.tensor(x, requires_grad=True)
    position_ids = torch.tensor(np.broadcast_to(positions, (b, t)))
    cos_sin = rotary(x_t, position_ids)
    y_t, _ = module(x_t, position_embeddings=cos_sin, attention_mask=_additive_mask(b, t, mask))
    y_t.backward(torch.tensor(dy))
    _assert_close(y[real], y_t.detach().numpy()[real], "y")
    _assert_close(dx, x_t.grad.numpy(), "dx")
    for name, grad in grads.items():
        ref = getattr(module, HF_NAMES[name]).weight.grad.numpy()
        _assert_close(grad, ref if ref.ndim == 1 else ref.T, name)


def _assert_close(ours: np.ndarray, ref: np.ndarray, name: str) -> None:
    np.testing.assert_allclose(ours, ref, rtol=TORCH_TOL, atol=TORCH_TOL * float(np.abs(ref).max()),
                               err_msg=name)
