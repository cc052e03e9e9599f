"""config.json <-> the moe and mixtral configs (io/hf/moe.py, io/hf/mixtral.py), without torch:
round trips for each model_type, which model_type a config is written as, and the values that
are refused in one line (too many experts per token, an mlp_only_layers entry past the layers,
router jitter, routings no HF class has)."""
import json

import pytest

from glassformer.errors import GlassformerError
from glassformer.io.hf_config import config_from_hf, config_to_hf
from glassformer.models.mixtral import MixtralConfig
from glassformer.models.moe import MoeLlamaConfig

TINY = dict(vocab_size=11, max_seq_len=16, n_layer=3, n_head=4, n_kv_head=2, d_model=8, d_ff=12)


def hf_dict(model_type: str, **overrides) -> dict:
    base = {"model_type": model_type, "vocab_size": 11, "hidden_size": 8,
            "intermediate_size": 12, "num_hidden_layers": 2, "num_attention_heads": 4,
            "num_key_value_heads": 2, "max_position_embeddings": 16, "rms_norm_eps": 1e-6,
            "hidden_act": "silu"}
    if model_type != "qwen3":  # the dense one has no experts
        base["num_experts_per_tok"] = 2
    return {**base, **overrides}


@pytest.mark.parametrize("cfg,model_type", [
    (MoeLlamaConfig(**TINY, n_experts=0), "qwen3"),
    (MoeLlamaConfig(**TINY, n_experts=5, experts_per_token=3, expert_d_ff=6, sparse_step=2,
                    head_dim=6), "qwen3_moe"),
    (MoeLlamaConfig(**TINY, n_experts=5, expert_d_ff=6, sparse_step=1,
                    extra_dense_layers=(0, 2)), "qwen3_moe"),
    (MoeLlamaConfig(**TINY, qk_norm="proj", n_experts=4, norm_topk_prob=False), "olmoe"),
    (MixtralConfig(**TINY, n_experts=4), "mixtral"),
])
def test_round_trip_through_config_json(cfg, model_type):
    hf = config_to_hf(cfg)
    assert hf["model_type"] == model_type
    back = config_from_hf(hf)
    assert type(back) is type(cfg)
    assert back.block_config() == cfg.block_config()   # the same model, field for field


def test_v4_and_v5_expert_count_keys():
    v4 = config_from_hf(hf_dict("qwen3_moe", num_experts=4, moe_intermediate_size=6))
    v5 = config_from_hf(hf_dict("qwen3_moe", num_local_experts=4, moe_intermediate_size=6))
    assert v4 == v5 and v4.n_experts == 4 and v4.moe_config().expert_d_ff == 6


@pytest.mark.parametrize("hf,message", [
    (hf_dict("olmoe", num_experts=4, num_experts_per_tok=5),
     "num_experts_per_tok=5 must be between 1 and num_experts=4"),
    (hf_dict("mixtral", num_local_experts=2, num_experts_per_tok=3),
     "num_experts_per_tok=3 must be between 1 and num_local_experts=2"),
    # mlp_only_layers loads (issue 49); a layer the model does not have is refused
    (hf_dict("qwen3_moe", num_experts=4, moe_intermediate_size=6, mlp_only_layers=[2]),
     "mlp_only_layers=\\[2\\]; it lists layer indices from 0 to num_hidden_layers - 1 = 1"),
    (hf_dict("mixtral", num_local_experts=4, router_jitter_noise=0.1),
     "router_jitter_noise=0.1"),
    (hf_dict("olmoe", num_experts=4, clip_qkv=8.0), "clip_qkv=8.0"),
    (hf_dict("qwen3", shared_expert_intermediate_size=4), "'shared_expert_intermediate_size'"),
])
def test_refused_config_json_values_are_one_line(hf, message):
    with pytest.raises(GlassformerError, match=message) as err:
        config_from_hf(hf)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("cfg,message", [
    (MoeLlamaConfig(**TINY, router_bias=True), "routes by softmax top-k only"),
    (MoeLlamaConfig(**TINY, shared_d_ff=4), "routes by softmax top-k only"),
    (MoeLlamaConfig(**TINY, qk_norm="none"), "no Hugging Face family computes qk_norm='none'"),
    (MixtralConfig(**TINY, qk_norm="head"), "a Mixtral folder has no QK-norm"),
])
def test_export_refuses_what_no_hf_class_computes(cfg, message):
    with pytest.raises(GlassformerError, match=message):
        config_to_hf(cfg)


def test_bad_moe_fields_are_one_line():
    with pytest.raises(GlassformerError, match="experts_per_token=9 must be between 1 and "
                                               "n_experts=8"):
        MoeLlamaConfig(**TINY, experts_per_token=9)
    with pytest.raises(GlassformerError, match="sparse_step at least 1"):
        MoeLlamaConfig(**TINY, sparse_step=0)
    with pytest.raises(GlassformerError, match="MoeLlamaConfig n_experts must be an int"):
        MoeLlamaConfig(**TINY, n_experts=2.0)


def test_mlp_only_layers_keep_a_dense_mlp_as_transformers_reads_them():
    """transformers' rule: layer i is sparse when it is not in mlp_only_layers and
    (i + 1) % decoder_sparse_step == 0."""
    hf = hf_dict("qwen3_moe", num_hidden_layers=4, num_experts=4, moe_intermediate_size=6,
                 decoder_sparse_step=2, mlp_only_layers=[1])
    cfg = config_from_hf(hf)
    assert cfg.extra_dense_layers == (1,) and cfg.dense_layers() == (0, 1, 2)
    assert config_to_hf(cfg)["mlp_only_layers"] == [1]
    assert config_from_hf({**hf, "mlp_only_layers": None}).dense_layers() == (0, 2)
    # saved in a run's checkpoint as JSON: the list comes back as the same config
    assert MoeLlamaConfig.from_dict(json.loads(json.dumps(cfg.to_dict()))) == cfg


@pytest.mark.parametrize("cfg,message", [
    (dict(extra_dense_layers=(3,)), "extra_dense_layers names layer 3, but the model has layers "
                                    "0 to 2"),
    (dict(extra_dense_layers=("1",)), "MoeLlamaConfig extra_dense_layers must be a list of "
                                      "integers, got \\('1',\\)"),
    (dict(extra_dense_layers=(True,)), "must be a list of integers"),
])
def test_bad_extra_dense_layers_are_one_line(cfg, message):
    with pytest.raises(GlassformerError, match=message):
        MoeLlamaConfig(**TINY, **cfg)


def test_olmoe_and_mixtral_exports_refuse_extra_dense_layers():
    with pytest.raises(GlassformerError, match="no Hugging Face family computes qk_norm='proj'"):
        config_to_hf(MoeLlamaConfig(**TINY, qk_norm="proj", extra_dense_layers=(1,)))
    with pytest.raises(GlassformerError, match="a Mixtral folder has no QK-norm"):
        config_to_hf(MixtralConfig(**TINY, extra_dense_layers=(1,)))
