"""Sliding windows at parity with transformers, on random configs built offline (odd sizes, GQA,
windows shorter than the prompt, several layer_types patterns, left padding): Mistral,
Qwen2 with use_sliding_window, Gemma 3 text and gpt-oss (tests/models/window_check.py)."""
import pytest

from glassformer.errors import GlassformerError
from glassformer.io.hf_config import config_from_hf

from tests.models.window_check import (check_export, check_gradients, check_loaded,
                                       spread_out)

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

V = 83
WINDOW = 5


def mistral(**overrides):
    torch.manual_seed(0)
    cfg = transformers.MistralConfig(
        vocab_size=V, hidden_size=36, intermediate_size=50, num_hidden_layers=2,
        num_attention_heads=6, num_key_value_heads=2, head_dim=8, max_position_embeddings=128,
        sliding_window=WINDOW, initializer_range=0.2, bos_token_id=None, eos_token_id=None,
        **overrides)
    return spread_out(torch, transformers.MistralForCausalLM(cfg))


def qwen2_windowed():
    torch.manual_seed(0)
    cfg = transformers.Qwen2Config(
        vocab_size=V, hidden_size=24, intermediate_size=40, num_hidden_layers=3,
        num_attention_heads=3, num_key_value_heads=1, max_position_embeddings=128,
        use_sliding_window=True, sliding_window=WINDOW, max_window_layers=1,
        initializer_range=0.2, bos_token_id=None, eos_token_id=None)
    return spread_out(torch, transformers.Qwen2ForCausalLM(cfg))


def test_mistral_windowed_logits_greedy_gradients_and_export(tmp_path):
    reference = mistral()
    model = check_loaded(reference, tmp_path / "hf", WINDOW, V)
    assert model.cfg.sliding_window == WINDOW and model.cfg.max_seq_len == 128  # no cap
    check_gradients(torch, reference, model, V, 3 * WINDOW)
    check_export(torch, transformers, model, tmp_path / "ours", 3 * WINDOW)


@pytest.mark.slow
def test_qwen2_slides_only_the_layers_its_layer_types_name(tmp_path):
    reference = qwen2_windowed()
    model = check_loaded(reference, tmp_path / "hf", WINDOW, V)
    assert model.cfg.full_layers == (0,)
    check_export(torch, transformers, model, tmp_path / "ours", 3 * WINDOW)


def _hf(**overrides):
    base = {"model_type": "mistral", "vocab_size": V, "hidden_size": 16,
            "intermediate_size": 24, "num_hidden_layers": 2, "num_attention_heads": 2,
            "max_position_embeddings": 64, "hidden_act": "silu", "sliding_window": 4}
    return {**base, **overrides}


def test_window_zero_and_layer_types_of_the_wrong_length_are_one_line_each():
    with pytest.raises(GlassformerError, match="sliding_window must be"):
        config_from_hf(_hf(sliding_window=0))
    with pytest.raises(GlassformerError, match="layer_types has 3 entries, but "
                                               "num_hidden_layers is 2"):
        config_from_hf(_hf(layer_types=["sliding_attention"] * 3))


def gemma3(layer_types, *, softcaps=False):
    torch.manual_seed(0)
    caps = dict(final_logit_softcapping=4.0) if softcaps else {}
    cfg = transformers.Gemma3TextConfig(
        vocab_size=V, hidden_size=40, intermediate_size=56, num_hidden_layers=len(layer_types),
        num_attention_heads=4, num_key_value_heads=2, head_dim=10, max_position_embeddings=128,
        sliding_window=WINDOW, layer_types=layer_types, query_pre_attn_scalar=12,
        rope_parameters={"full_attention": {"rope_type": "linear", "factor": 2.0,
                                            "rope_theta": 5000.0},
                         "sliding_attention": {"rope_type": "default", "rope_theta": 50.0}},
        initializer_range=0.2, pad_token_id=None, bos_token_id=None, eos_token_id=None,
        attn_implementation="eager", **caps)
    return spread_out(torch, transformers.Gemma3ForCausalLM(cfg))


LOCAL, GLOBAL = "sliding_attention", "full_attention"


@pytest.mark.parametrize("pattern,softcaps", [
    ([LOCAL, LOCAL, GLOBAL], False),
    pytest.param([GLOBAL, LOCAL, LOCAL, LOCAL, LOCAL, LOCAL, GLOBAL], True,
                 marks=pytest.mark.slow),
])
def test_gemma3_local_global_logits_greedy_gradients_and_export(pattern, softcaps, tmp_path):
    reference = gemma3(pattern, softcaps=softcaps)
    model = check_loaded(reference, tmp_path / "hf", WINDOW, V)
    assert model.arch == "gemma3"
    assert model.cfg.full_layers == tuple(i for i, kind in enumerate(pattern) if kind == GLOBAL)
    check_gradients(torch, reference, model, V, 3 * WINDOW)
    check_export(torch, transformers, model, tmp_path / "ours", 3 * WINDOW)


def gpt_oss(layer_types):
    torch.manual_seed(0)
    cfg = transformers.GptOssConfig(
        vocab_size=V, hidden_size=36, intermediate_size=20, num_hidden_layers=len(layer_types),
        num_attention_heads=6, num_key_value_heads=2, head_dim=8, max_position_embeddings=256,
        sliding_window=WINDOW, layer_types=layer_types, num_local_experts=5,
        num_experts_per_tok=2, swiglu_limit=2.0,
        rope_parameters={"rope_type": "yarn", "factor": 4.0, "beta_fast": 32.0, "beta_slow": 1.0,
                         "truncate": False, "original_max_position_embeddings": 64,
                         "rope_theta": 1000.0},
        initializer_range=0.2, bos_token_id=None, eos_token_id=None, pad_token_id=None,
        attn_implementation="eager")
    return spread_out(torch, transformers.GptOssForCausalLM(cfg), scale=0.5)


@pytest.mark.parametrize("pattern", [[LOCAL, GLOBAL, LOCAL],
                                     pytest.param([GLOBAL, LOCAL], marks=pytest.mark.slow)])
def test_gpt_oss_sinks_windows_moe_logits_greedy_gradients_and_export(pattern, tmp_path):
    reference = gpt_oss(pattern)
    model = check_loaded(reference, tmp_path / "hf", WINDOW, V)
    assert model.arch == "gpt_oss" and model.cfg.rope_type == "yarn"
    check_gradients(torch, reference, model, V, 3 * WINDOW)
    check_export(torch, transformers, model, tmp_path / "ours", 3 * WINDOW)


def test_gemma3_and_gpt_oss_configs_refuse_what_they_cannot_match_in_one_line():
    gemma = {"model_type": "gemma3_text", "vocab_size": V, "hidden_size": 16,
             "intermediate_size": 24, "num_hidden_layers": 2, "num_attention_heads": 2,
             "head_dim": 8, "max_position_embeddings": 64, "sliding_window": 4,
             "layer_types": [LOCAL, GLOBAL]}
    assert config_from_hf(gemma).full_layers == (1,)
    with pytest.raises(GlassformerError, match="attn_logit_softcapping=50"):
        config_from_hf({**gemma, "attn_logit_softcapping": 50.0})
    with pytest.raises(GlassformerError, match="layer_types has 1 entries"):
        config_from_hf({**gemma, "layer_types": [LOCAL]})
    oss = {"model_type": "gpt_oss", "vocab_size": V, "hidden_size": 16, "intermediate_size": 8,
           "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1,
           "head_dim": 8, "max_position_embeddings": 64, "num_local_experts": 3,
           "num_experts_per_tok": 2, "sliding_window": 0, "layer_types": [LOCAL, GLOBAL]}
    with pytest.raises(GlassformerError, match="sliding_window must be a whole number"):
        config_from_hf(oss)
