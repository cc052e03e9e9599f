"""Every causal family's `kv_layout(cfg)` is a KVLayout (blocks/kv_cache.py): GPT-2 one cache
head per head, LLaMA/MoE the n_kv_head shared heads, DeepSeek-V3 the latent (heads 1, key_dim R,
value_dim Dr). `Model.new_cache` allocates it and `Model.cache_bytes` (what serve's budget asks)
is exactly what that cache takes; encoders have none."""
import numpy as np
import pytest

from glassformer.blocks.kv_cache import KVLayout
from glassformer.errors import GlassformerError
from glassformer.models import bert, deepseek_v3, gpt2, llama, mixtral, moe, seq2seq
from glassformer.models.model import Model
from glassformer.models.registry import arch_of, family

TINY = dict(vocab_size=11, max_seq_len=8, n_layer=2, n_head=4, d_model=16)
MLA = dict(kv_lora_rank=6, qk_nope_head_dim=3, qk_rope_head_dim=4, v_head_dim=2, d_ff=10)

CASES = [
    (gpt2.GPT2Config(**TINY), KVLayout(heads=4, key_dim=4, value_dim=4)),
    (llama.LlamaConfig(**TINY, n_kv_head=2), KVLayout(heads=2, key_dim=4, value_dim=4)),
    (llama.LlamaConfig(**TINY, n_kv_head=1, head_dim=6), KVLayout(heads=1, key_dim=6,
                                                                  value_dim=6)),
    (moe.MoeLlamaConfig(**TINY, n_kv_head=2, n_experts=2, experts_per_token=1),
     KVLayout(heads=2, key_dim=4, value_dim=4)),
    (mixtral.MixtralConfig(**TINY, n_kv_head=1, n_experts=2, experts_per_token=1),
     KVLayout(heads=1, key_dim=4, value_dim=4)),
    (deepseek_v3.DeepseekV3Config(**TINY, **MLA), KVLayout(heads=1, key_dim=6, value_dim=4)),
]
IDS = ["gpt2", "llama-gqa", "llama-mqa-head-dim", "moe", "mixtral", "deepseek_v3-mla"]


@pytest.mark.parametrize("cfg, layout", CASES, ids=IDS)
def test_each_causal_family_gives_its_layout(cfg, layout):
    model = Model(cfg, family(arch_of(cfg)).init_params(cfg, np.random.default_rng(0)))
    assert model.family.kv_layout(cfg) == layout == model.kv_layout()
    cache = model.new_cache(3, max_len=5)
    assert cache.layout == layout and len(cache.k) == len(cache.v) == cfg.n_layer
    assert cache.k[0].shape == (3, layout.heads, 5, layout.key_dim)   # (B, K, T_max, D)
    assert cache.v[0].shape == (3, layout.heads, 5, layout.value_dim)
    assert model.cache_bytes(3, 5) == sum(a.nbytes for a in cache.k + cache.v)
    whole = model.new_cache(1)                                       # default: the context
    assert model.cache_bytes(1) == sum(a.nbytes for a in whole.k + whole.v)


def test_the_latent_cache_costs_r_plus_dr_floats_not_two_h_d():
    cfg = deepseek_v3.DeepseekV3Config(**TINY, **MLA)
    model = Model(cfg, deepseek_v3.FAMILY.init_params(cfg, np.random.default_rng(0)))
    # float32, 2 layers, 2 rows, 8 positions, R + Dr = 6 + 4 floats
    assert model.cache_bytes(2, 8) == 4 * 2 * 2 * 8 * (6 + 4)


def test_encoders_have_no_layout():
    cfg = bert.BertConfig(**TINY)
    model = Model(cfg, bert.init_params(cfg, np.random.default_rng(0)))
    assert bert.FAMILY.kv_layout is None and seq2seq.FAMILY.kv_layout is None
    for ask in (model.kv_layout, lambda: model.cache_bytes(1)):
        with pytest.raises(GlassformerError, match="encoder"):
            ask()
