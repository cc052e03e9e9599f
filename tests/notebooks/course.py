"""The course's notebooks as test parameters: the quick ones (1, 2) in the default selection, the
ones that train or load SmolLM2 marked slow (CI runs them too)."""
import pytest

LANGS = ["en", "zh"]
SLOW = pytest.mark.slow
NOTEBOOKS = [
    pytest.param("1_self_attention_by_hand", id="1"),
    pytest.param("2_one_transformer_block", id="2"),
    pytest.param("3_training_a_tiny_gpt", id="3", marks=SLOW),
    pytest.param("4_tokenizers", id="4", marks=SLOW),
    pytest.param("5_bert_and_the_encoder_decoder", id="5", marks=SLOW),
    pytest.param("6_a_real_model_smollm2", id="6", marks=SLOW),
    pytest.param("7_mixture_of_experts_and_latent_attention", id="7", marks=SLOW),
    pytest.param("8_learning_from_preferences_and_rewards", id="8", marks=SLOW),
    pytest.param("9_serving_a_model", id="9", marks=SLOW),
    pytest.param("10_looking_inside", id="10", marks=SLOW),
]
