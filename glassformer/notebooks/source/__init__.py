"""The course's notebooks, in order: file name -> cells (one module each, prose in en and zh)."""
from glassformer.notebooks.source import (n1_attention, n2_block, n3_tiny_gpt, n4_tokenizers,
                                          n5_bert_seq2seq, n6_real_models, n7_moe_mla,
                                          n8_preferences, n9_serving)
from glassformer.notebooks.source import n10_looking_inside

NOTEBOOKS = {
    "1_self_attention_by_hand": n1_attention.CELLS,
    "2_one_transformer_block": n2_block.CELLS,
    "3_training_a_tiny_gpt": n3_tiny_gpt.CELLS,
    "4_tokenizers": n4_tokenizers.CELLS,
    "5_bert_and_the_encoder_decoder": n5_bert_seq2seq.CELLS,
    "6_a_real_model_smollm2": n6_real_models.CELLS,
    "7_mixture_of_experts_and_latent_attention": n7_moe_mla.CELLS,
    "8_learning_from_preferences_and_rewards": n8_preferences.CELLS,
    "9_serving_a_model": n9_serving.CELLS,
    "10_looking_inside": n10_looking_inside.CELLS,
}
