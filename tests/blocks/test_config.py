"""BlockConfig: defaults derived from d_model and n_head, and clear errors for bad settings."""
from __future__ import annotations

import re

import pytest

from glassformer.blocks.config import BlockConfig
from glassformer.errors import GlassformerError


def test_derived_sizes():
    cfg = BlockConfig(d_model=768, n_head=12)
    assert (cfg.dim_per_head, cfg.kv_heads, cfg.hidden) == (64, 12, 3072)
    gqa = BlockConfig(d_model=64, n_head=8, n_kv_head=2, d_ff=172, position="rope")
    assert (gqa.dim_per_head, gqa.kv_heads, gqa.hidden) == (8, 2, 172)


@pytest.mark.parametrize("kwargs, message", [
    (dict(d_model=768, n_head=10), "n_head=10 must divide d_model=768"),
    (dict(d_model=64, n_head=8, n_kv_head=3), "n_head=8 must be a multiple of n_kv_head=3"),
    (dict(d_model=64, n_head=4, n_kv_head=8), "n_head=4 must be a multiple of n_kv_head=8"),
    (dict(d_model=64, n_head=4, n_kv_head=0), "n_head=4 must be a multiple of n_kv_head=0"),
    (dict(d_model=12, n_head=4, position="rope"), "RoPE needs an even head dim D, got 3"),
    (dict(d_model=16, n_head=2, head_dim=5, position="rope"),
     "RoPE needs an even head dim D, got 5"),
    (dict(d_model=16, n_head=2, norm="batch"), "norm must be one of layer, rms, got 'batch'"),
    (dict(d_model=16, n_head=2, mlp="geglu"), "mlp must be one of"),
    (dict(d_model=16, n_head=2, norm_position="sandwich"), "norm_position must be one of"),
    (dict(d_model=16, n_head=2, position="learned"), "position must be one of"),
])
def test_bad_settings_are_rejected(kwargs, message):
    with pytest.raises(GlassformerError, match=re.escape(message)):
        BlockConfig(**kwargs)


def test_errors_are_value_errors():
    """Callers that do not know glassformer can still catch a plain ValueError."""
    with pytest.raises(ValueError):
        BlockConfig(d_model=10, n_head=3)
