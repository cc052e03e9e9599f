"""config.json <-> glassformer configs (io/hf_config.py, io/hf/): round trips for every family,
both RoPE spellings, sliding windows, the keys and values that are refused, and the records: one
per family, one per model_type."""
import pytest

from glassformer.errors import GlassformerError
from glassformer.io.hf import llama as hf_llama
from glassformer.io.hf import registry as hf_registry
from glassformer.io.hf_config import config_from_hf, config_to_hf
from glassformer.models import registry as models_registry
from glassformer.models.bert import BertConfig
from glassformer.models.gpt2 import GPT2Config
from glassformer.models.llama import LlamaConfig


def tiny_llama(**overrides):
    base = dict(vocab_size=11, max_seq_len=8, n_layer=2, n_head=4, n_kv_head=2, d_model=8,
                d_ff=12)
    return LlamaConfig(**{**base, **overrides})


def hf_llama_dict(**overrides):
    return {"model_type": "llama", "vocab_size": 11, "hidden_size": 8, "intermediate_size": 12,
            "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2,
            "max_position_embeddings": 32, "rms_norm_eps": 1e-5, "hidden_act": "silu",
            "architectures": ["LlamaForCausalLM"], "torch_dtype": "bfloat16", **overrides}


def test_llama_config_round_trips_as_qwen2_and_llama():
    cfg = tiny_llama(qkv_bias=True, tie_embeddings=True, rope_theta=500.0)
    assert config_to_hf(cfg)["model_type"] == "qwen2"
    assert config_from_hf(config_to_hf(cfg)) == cfg
    plain = tiny_llama(head_dim=4)
    assert config_to_hf(plain)["model_type"] == "llama"
    assert config_from_hf(config_to_hf(plain)) == plain
    with pytest.raises(GlassformerError, match="out_bias=True, qkv_bias=False"):
        config_to_hf(tiny_llama(out_bias=True))


def test_llama_reads_both_rope_spellings_and_slides_a_window_without_capping_the_context():
    assert config_from_hf(hf_llama_dict(rope_theta=1e5)).rope_theta == 1e5
    v5 = hf_llama_dict(rope_parameters={"rope_type": "default", "rope_theta": 5e5})
    assert config_from_hf(v5).rope_theta == 5e5
    mistral = hf_llama_dict(model_type="mistral", sliding_window=16)
    windowed = config_from_hf(mistral)
    assert (windowed.max_seq_len, windowed.sliding_window) == (32, 16)  # the window is real now
    qwen_off = hf_llama_dict(model_type="qwen2", sliding_window=16, use_sliding_window=False)
    off = config_from_hf(qwen_off)
    assert (off.max_seq_len, off.sliding_window) == (32, None)


@pytest.mark.parametrize("rope", [
    {"rope_type": "linear", "factor": 2.0},
    {"type": "dynamic", "factor": 3.0},
    {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
     "original_max_position_embeddings": 8},
    {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8,
     "beta_fast": 16.0, "attention_factor": 1.5},
])
def test_rope_scaling_round_trips(rope):
    cfg = config_from_hf(hf_llama_dict(rope_scaling=rope, rope_theta=500.0))
    assert cfg.rope_type == rope.get("rope_type", rope.get("type"))
    assert cfg.rope_factor == rope["factor"] and cfg.rope_theta == 500.0
    assert config_from_hf(config_to_hf(cfg)) == cfg
    v5 = config_to_hf(cfg)["rope_parameters"]
    assert config_from_hf(hf_llama_dict(rope_parameters=v5)) == cfg


def test_rope_scaling_fields_transformers_derives():
    dynamic = config_from_hf(hf_llama_dict(rope_scaling={"type": "dynamic", "factor": 3.0}))
    assert (dynamic.max_seq_len, dynamic.rope_original_max_seq_len) == (96, 32)
    deepseek = {"rope_type": "yarn", "original_max_position_embeddings": 8, "mscale": 1.0,
                "mscale_all_dim": 0.5}
    yarn = config_from_hf(hf_llama_dict(rope_parameters=deepseek))
    assert yarn.rope_factor == 4.0                       # max_position_embeddings / original
    assert yarn.rope_attention_factor == pytest.approx((0.1 * 1.386294 + 1) / (0.05 * 1.386294 + 1))
    llama3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
              "high_freq_factor": 4.0}
    assert config_from_hf(hf_llama_dict(rope_scaling=llama3)).rope_original_max_seq_len == 32


@pytest.mark.parametrize("overrides,message", [
    (dict(rope_scaling={"rope_type": "llama3", "factor": 8.0}), "without \\['high_freq_factor"),
    (dict(rope_scaling={"type": "linear"}), "linear RoPE without a factor"),
    (dict(rope_parameters={"rope_type": "longrope", "rope_theta": 1e4}), "'longrope'"),
    (dict(rope_scaling={"rope_type": "dynamic", "factor": 2.0, "beta_fast": 3}), "beta_fast"),
    (dict(mlp_bias=True), "mlp_bias=True"),
    (dict(hidden_act="gelu"), "hidden_act='gelu'"),
    (dict(quantization_config={"quant_method": "gptq"}), "'quantization_config' is unknown"),
    (dict(model_type="gemma"), "model_type 'gemma' is not one glassformer loads"),
    (dict(model_type="qwen2", layer_types=["full_attention", "chunked_attention"]),
     "chunked_attention"),
])
def test_llama_rejects_what_it_cannot_honour(overrides, message):
    with pytest.raises(GlassformerError, match=message):
        config_from_hf(hf_llama_dict(**overrides))


def test_gpt2_config_round_trips_and_rejections():
    cfg = GPT2Config(vocab_size=11, max_seq_len=8, n_layer=1, n_head=2, d_model=8, dropout=0.1,
                     tie_embeddings=False)
    assert config_from_hf(config_to_hf(cfg)) == cfg
    hf = config_to_hf(cfg)
    with pytest.raises(GlassformerError, match="one dropout for both"):
        config_from_hf({**hf, "embd_pdrop": 0.2})
    with pytest.raises(GlassformerError, match="scale_attn_by_inverse_layer_idx=True"):
        config_from_hf({**hf, "scale_attn_by_inverse_layer_idx": True})


def test_bert_config_round_trips_and_rejections():
    cfg = BertConfig(vocab_size=11, max_seq_len=8, n_layer=1, n_head=2, d_model=8, d_ff=16,
                     activation="gelu_tanh")
    assert config_from_hf(config_to_hf(cfg)) == cfg
    with_head = BertConfig(vocab_size=11, max_seq_len=8, n_layer=1, n_head=2, d_model=8, d_ff=16,
                           mlm_head=True)
    assert config_from_hf(config_to_hf(with_head), mlm_head=True) == with_head
    hf = config_to_hf(cfg)
    with pytest.raises(GlassformerError, match="position_embedding_type='relative_key'"):
        config_from_hf({**hf, "position_embedding_type": "relative_key"})
    with pytest.raises(GlassformerError, match="is_decoder=True"):
        config_from_hf({**hf, "is_decoder": True})
    with pytest.raises(GlassformerError, match="unties the MLM decoder"):
        config_from_hf({**hf, "tie_word_embeddings": False}, mlm_head=True)


def test_every_family_has_one_hf_record_and_its_model_types_load_as_it():
    assert set(hf_registry.FAMILIES) == set(models_registry.FAMILIES)
    for arch, hf in hf_registry.FAMILIES.items():
        assert hf.arch == arch and hf.model_types
        assert all(record.arch == arch for record in hf.model_types)
        assert all(hf_registry.MODEL_TYPES[record.name] is record for record in hf.model_types)


def test_a_new_model_type_of_a_family_is_one_record(monkeypatch):
    """What CONTRIBUTING.md says: a model_type of an existing family is one ModelType in its
    family's file (here put straight into the lookup): it is found, checked and read."""
    smol = hf_llama.LLAMA._replace(name="smollm", reads=hf_llama.READS | {"smol_marker"})
    monkeypatch.setitem(hf_registry.MODEL_TYPES, "smollm", smol)
    assert config_from_hf(hf_llama_dict(model_type="smollm", smol_marker=1)) == config_from_hf(
        hf_llama_dict())
    with pytest.raises(GlassformerError, match="unknown to glassformer's smollm loader"):
        config_from_hf(hf_llama_dict(model_type="smollm", gemma_marker=1))
