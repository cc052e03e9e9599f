"""Hugging Face config.json <-> glassformer configs: the checks every model_type shares.

config.json's `model_type` picks a `ModelType` record (io/hf/registry.py), which names the
glassformer arch it loads as, the keys it reads, the switch values it requires, and its from_hf:

    gpt2                   -> GPT2Config     io/hf/gpt2.py
    llama, qwen2, mistral  -> LlamaConfig    io/hf/llama.py
    bert                   -> BertConfig     io/hf/bert.py
    marian, bart, mbart    -> Seq2SeqConfig  io/hf/seq2seq.py
    qwen3, qwen3_moe, olmoe -> MoeLlamaConfig io/hf/moe.py
    mixtral                -> MixtralConfig  io/hf/mixtral.py
    deepseek_v3            -> DeepseekV3Config  io/hf/deepseek_v3.py

`config_from_hf` accepts a config.json only if every key is known, either as one the model_type
reads (`ModelType.reads`), as harmless metadata (`METADATA_KEYS`), or as a switch set to the one
value glassformer implements (`ModelType.required`, `COMMON_REQUIRED`). An unknown key may change
the math, so it is an error. `config_to_hf` writes the config.json transformers needs to rebuild
the same model (the family's to_hf picks the model_type). Tensor names are io/hf_names.py's
business; model math is models/'s.
"""
from __future__ import annotations

from glassformer.errors import GlassformerError
from glassformer.io.hf.records import ModelType
from glassformer.io.hf.registry import hf_family, model_type
from glassformer.models.registry import arch_of

# Metadata, generation defaults and init settings: they never change a forward or backward pass.
METADATA_KEYS = frozenset({
    "architectures", "model_type", "transformers_version", "torch_dtype", "dtype",
    "_name_or_path", "_commit_hash", "_attn_implementation", "_attn_implementation_autoset",
    "id2label", "label2id", "num_labels", "problem_type", "finetuning_task", "tokenizer_class",
    "prefix", "task_specific_params", "return_dict", "output_hidden_states", "output_attentions",
    "torchscript", "use_bfloat16", "tf_legacy_loss", "chunk_size_feed_forward",
    "gradient_checkpointing", "use_cache", "initializer_range", "bos_token_id", "eos_token_id",
    "pad_token_id", "sep_token_id", "decoder_start_token_id", "max_length", "min_length",
    "do_sample", "early_stopping", "num_beams", "num_beam_groups", "diversity_penalty",
    "temperature", "top_k", "top_p", "typical_p", "repetition_penalty", "length_penalty",
    "no_repeat_ngram_size", "encoder_no_repeat_ngram_size", "bad_words_ids",
    "num_return_sequences", "output_scores", "return_dict_in_generate", "forced_bos_token_id",
    "forced_eos_token_id", "remove_invalid_values", "exponential_decay_length_penalty",
    "suppress_tokens", "begin_suppress_tokens", "transformers.js_config",
})
# Switches with the values glassformer implements.
COMMON_REQUIRED = {"is_encoder_decoder": (False,), "is_decoder": (False,),
                   "add_cross_attention": (False,), "tie_encoder_decoder": (False,),
                   "cross_attention_hidden_size": (None,), "pruned_heads": ({},)}
LAYER_TYPES = ("full_attention", "sliding_attention")   # the layer_types glassformer implements


def config_from_hf(hf: dict, **from_tensors):
    """A config.json (as a dict) -> the glassformer config of its family.

    from_tensors: the config fields the weights decide (HFFamily.from_tensors): for BERT,
    mlm_head=True when the weights hold the masked-LM head (cls.* tensors); for an
    encoder-decoder, logits_bias=False when they lack final_logits_bias. A missing required key
    raises KeyError; a key or value that would change the math raises GlassformerError.
    """
    record = model_type(hf.get("model_type"))
    check_hf_config(hf, record)
    return record.from_hf(hf, **from_tensors)


def config_to_hf(cfg) -> dict:
    """A glassformer config -> the config.json of the matching transformers model."""
    return hf_family(arch_of(cfg)).to_hf(cfg)


def check_hf_config(hf: dict, record: ModelType) -> None:
    """Raise a GlassformerError for a config.json key that could change this model's math."""
    required = {**COMMON_REQUIRED, **record.required}
    for key, value in hf.items():
        if key in required:
            if value not in required[key]:
                raise GlassformerError(f"config.json has {key}={value!r}, which glassformer does "
                                       f"not implement for {record.name} (supported: "
                                       f"{', '.join(map(repr, required[key]))})")
        elif key not in METADATA_KEYS and key not in record.reads:
            raise GlassformerError(f"config.json key {key!r} is unknown to glassformer's "
                                   f"{record.name} loader; it may change the model's math, so "
                                   "glassformer refuses to guess")
    for layer_type in hf.get("layer_types") or ():
        if layer_type not in LAYER_TYPES + record.layer_types:
            raise GlassformerError(f"config.json layer_types holds {layer_type!r}; glassformer "
                                   "implements full_attention and sliding_attention only")
