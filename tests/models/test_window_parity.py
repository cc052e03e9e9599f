"""Sliding windows at parity with transformers, on random configs built offline (odd sizes, GQA,
windows shorter than the prompt, several layer_types patterns, left padding): Mistral,
Qwen2 with use_sliding_window, Gemma 3 text and gpt-oss (tests/models/window_check.py)."""
import numpy as np
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
