"""The Family records: every family's param_shapes lists exactly what init_params makes (same
names, same order, same shapes), configs round-trip through the shared dict helpers, and the
registry finds each family by its arch name."""
from __future__ import annotations

import numpy as np
import pytest

from glassformer.blocks.kv_cache import KVLayout
from glassformer.errors import GlassformerError
from glassformer.models import (bert, deepseek_v3, gemma3, gpt2, gpt_oss, llama, mixtral, moe,
                                qwen3_5, qwen3_next,
                                seq2seq)
from glassformer.models.model import Model
from glassformer.models.registry import FAMILIES, arch_of, config_from_dict, family

TINY = dict(vocab_size=11, max_seq_len=8, n_layer=2, n_head=2, d_model=8)
CONFIGS = [
    gpt2.GPT2Config(**TINY),
    gpt2.GPT2Config(**TINY, bias=False, tie_embeddings=False),
    llama.LlamaConfig(**TINY, n_kv_head=1),
    llama.LlamaConfig(**TINY, qkv_bias=True, tie_embeddings=True),
    bert.BertConfig(**TINY),
    bert.BertConfig(**TINY, mlm_head=True),
    seq2seq.Seq2SeqConfig(**TINY),
    seq2seq.Seq2SeqConfig(**TINY, n_dec_layer=1, norm_position="pre", positions="learned",
                          pos_offset=2, emb_norm=True, share_embeddings=False,
                          tie_embeddings=False, logits_bias=True),
    moe.MoeLlamaConfig(**TINY, n_kv_head=1, n_experts=4, expert_d_ff=6, sparse_step=2),
    moe.MoeLlamaConfig(**TINY, qk_norm="proj", n_experts=4, router_bias=True, shared_d_ff=4,
                       shared_gate=True, first_dense_layers=1),
    moe.MoeLlamaConfig(**TINY, n_experts=0),
    mixtral.MixtralConfig(**TINY, n_experts=3, experts_per_token=2),
    deepseek_v3.DeepseekV3Config(**TINY, d_ff=12, q_lora_rank=3, kv_lora_rank=4,
                                 qk_nope_head_dim=2, qk_rope_head_dim=2, v_head_dim=3),
    llama.LlamaConfig(**TINY, sliding_window=3, full_layers=(1,)),
    gemma3.Gemma3Config(**TINY, n_kv_head=1, sliding_window=3, full_layers=[1],
                        final_softcap=30.0),
    gpt_oss.GptOssConfig(**TINY, n_experts=3, expert_d_ff=5, sliding_window=2,
                         full_layers=(1,)),
    qwen3_next.Qwen3NextConfig(n_layer=3, full_layers=(1,), n_experts=3, shared_d_ff=5,
                               dense_layers=(2,)),
    qwen3_5.Qwen35Config(n_layer=2, full_layers=(0,)),
]


@pytest.mark.parametrize("cfg", CONFIGS, ids=repr)
def test_param_shapes_list_what_init_makes_in_init_order(cfg):
    fam = family(arch_of(cfg))
    params = fam.init_params(cfg, np.random.default_rng(0))
    assert [(name, p.shape) for name, p in params.items()] == list(fam.param_shapes(cfg).items())
    assert all(p.dtype == np.float32 for p in params.values())


@pytest.mark.parametrize("cfg", CONFIGS, ids=repr)
def test_config_round_trips_through_a_dict(cfg):
    data = cfg.to_dict()
    assert data["arch"] == cfg.ARCH == arch_of(cfg)
    assert config_from_dict(data) == cfg
    assert type(cfg).from_dict({k: v for k, v in data.items() if k != "arch"}) == cfg


def test_bad_config_dicts_are_clear_errors():
    with pytest.raises(GlassformerError, match="unknown GPT2Config keys"):
        gpt2.GPT2Config.from_dict({"arch": "gpt2", "n_embd": 8})
    with pytest.raises(GlassformerError, match="arch 'llama' given to GPT2Config"):
        gpt2.GPT2Config.from_dict({"arch": "llama"})
    with pytest.raises(GlassformerError, match="no 'arch' key"):
        config_from_dict({"n_layer": 2})
    with pytest.raises(GlassformerError, match="unknown architecture 't5'"):
        family("t5")


def test_registry_holds_each_module_record():
    assert FAMILIES == {"gpt2": gpt2.FAMILY, "llama": llama.FAMILY, "bert": bert.FAMILY,
                        "transformer": seq2seq.FAMILY, "moe": moe.FAMILY,
                        "mixtral": mixtral.FAMILY, "deepseek_v3": deepseek_v3.FAMILY,
                        "gemma3": gemma3.FAMILY, "gpt_oss": gpt_oss.FAMILY,
                        "qwen3_next": qwen3_next.FAMILY, "qwen3_5": qwen3_5.FAMILY}
    for name, fam in FAMILIES.items():
        assert fam.name == name == fam.config.ARCH
    assert gpt2.FAMILY.sliding_context and not llama.FAMILY.sliding_context
    assert llama.FAMILY.kv_layout(llama.LlamaConfig(**TINY, n_kv_head=1)) == KVLayout(1, 4, 4)


def test_an_encoder_has_no_kv_cache():
    cfg = bert.BertConfig(**TINY)
    model = Model(cfg, bert.init_params(cfg, np.random.default_rng(0)))
    assert bert.FAMILY.kv_layout is None
    with pytest.raises(GlassformerError, match="encoder"):
        model.new_cache(1)
