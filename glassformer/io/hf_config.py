"""Hugging Face config.json <-> glassformer configs: every config key name lives here.

config.json's `model_type` picks the family (`HF_ARCHS`):

    gpt2                   -> GPT2Config     (GPT2LMHeadModel / GPT2Model files)
    llama, qwen2, mistral  -> LlamaConfig    (*ForCausalLM / *Model files)
    bert                   -> BertConfig     (BertModel, or BertForMaskedLM with its MLM head)
    marian, bart, mbart    -> Seq2SeqConfig  (MarianMTModel, BartForConditionalGeneration,
                                              MBartForConditionalGeneration files)

`config_from_hf` accepts a config.json only if every key is known, either as one the family
reads (`READ_KEYS`), as harmless metadata (`METADATA_KEYS`), or as a switch set to the one value
glassformer implements (`REQUIRED_VALUES`). An unknown key may change the math, so it is an error.
`config_to_hf` writes the config.json transformers needs to rebuild the same model.
Tensor names are io/hf_names.py's business; model math is models/'s.
"""
from __future__ import annotations

from glassformer.errors import GlassformerError
from glassformer.models.bert import BertConfig
from glassformer.models.gpt2 import GPT2Config
from glassformer.models.llama import LlamaConfig
from glassformer.models.registry import arch_of
from glassformer.models.seq2seq import Seq2SeqConfig
from glassformer.ops.rope_scaling import yarn_mscale

# model_type in config.json -> glassformer arch
HF_ARCHS = {"gpt2": "gpt2", "llama": "llama", "qwen2": "llama", "mistral": "llama",
            "bert": "bert", "marian": "transformer", "bart": "transformer",
            "mbart": "transformer"}
TANH_GELUS = ("gelu_new", "gelu_pytorch_tanh", "gelu_fast")  # three spellings of tanh GELU

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
# Marian and BART: switches shared by both (activations as transformers' ACT2FN spells them).
SEQ2SEQ_ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "gelu_new": "gelu_tanh",
                       "gelu_pytorch_tanh": "gelu_tanh", "gelu_fast": "gelu_tanh",
                       "swish": "silu", "silu": "silu"}   # the hub's opus-mt models: swish
SEQ2SEQ_REQUIRED = {"is_encoder_decoder": (True,), "activation_function": tuple(SEQ2SEQ_ACTIVATIONS),
                    "normalize_before": (False,), "add_final_layer_norm": (False,),
                    "add_bias_logits": (False,),
                    # transformers 5 unties then the encoder's, decoder's and shared embeddings
                    # too (four tables); glassformer's encoder-decoder shares one
                    "tie_word_embeddings": (True,)}
# Switches with the values glassformer implements.
COMMON_REQUIRED = {"is_encoder_decoder": (False,), "is_decoder": (False,),
                   "add_cross_attention": (False,), "tie_encoder_decoder": (False,),
                   "cross_attention_hidden_size": (None,), "pruned_heads": ({},)}
REQUIRED_VALUES = {
    "gpt2": {"scale_attn_weights": (True,), "scale_attn_by_inverse_layer_idx": (False,),
             "activation_function": ("gelu_new", "gelu_pytorch_tanh", "gelu_fast", "gelu",
                                     "relu")},
    "llama": {"hidden_act": ("silu",), "mlp_bias": (False,), "rope_interleaved": (False, None)},
    "qwen2": {"hidden_act": ("silu",), "use_mrope": (False, None)},
    "mistral": {"hidden_act": ("silu",)},
    "bert": {"hidden_act": ("gelu", "gelu_new", "gelu_pytorch_tanh"),
             "position_embedding_type": ("absolute",)},
    # the legacy keys (normalize_before, ...) of older Marian and BART configs, which today's
    # transformers reads as these fixed architectures
    "marian": {**SEQ2SEQ_REQUIRED, "static_position_embeddings": (True,),
               "normalize_embedding": (False,), "share_encoder_decoder_embeddings": (True,)},
    "bart": {**SEQ2SEQ_REQUIRED, "static_position_embeddings": (False,),
             "normalize_embedding": (True,), "extra_pos_embeddings": (2,)},
    # mBART is BART in pre-norm, with a final LayerNorm after each stack
    "mbart": {**SEQ2SEQ_REQUIRED, "normalize_before": (True,), "add_final_layer_norm": (True,),
              "static_position_embeddings": (False,), "normalize_embedding": (True,)},
}
# Keys each family reads (or may ignore, with the reason in the comment).
READ_KEYS = {
    "gpt2": {"vocab_size", "n_positions", "n_ctx", "n_embd", "n_layer", "n_head", "n_inner",
             "layer_norm_epsilon", "resid_pdrop", "embd_pdrop", "tie_word_embeddings",
             "attn_pdrop",               # glassformer has no attention-weight dropout (training)
             "reorder_and_upcast_attn",  # float precision of torch's matmul only
             "summary_type", "summary_use_proj", "summary_activation", "summary_proj_to_labels",
             "summary_first_dropout"},   # GPT2DoubleHeadsModel's classifier, not loaded
    "llama": {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
              "num_attention_heads", "num_key_value_heads", "head_dim", "max_position_embeddings",
              "rms_norm_eps", "rope_theta", "rope_parameters", "rope_scaling", "attention_bias",
              "tie_word_embeddings",
              "attention_dropout",       # glassformer has no attention-weight dropout (training)
              "pretraining_tp",          # tensor-parallel slicing of the same matmuls
              "is_llama_config"},        # a marker in SmolLM2's config
    "bert": {"vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
             "intermediate_size", "max_position_embeddings", "type_vocab_size", "layer_norm_eps",
             "hidden_dropout_prob", "tie_word_embeddings",
             "attention_probs_dropout_prob",  # glassformer has no attention-weight dropout
             "classifier_dropout",            # classification heads are not loaded
             "directionality", "pooler_fc_size", "pooler_num_attention_heads",
             "pooler_num_fc_layers", "pooler_size_per_head", "pooler_type"},  # pooler, unused
}
READ_KEYS["marian"] = {
    "vocab_size", "decoder_vocab_size", "max_position_embeddings", "encoder_layers",
    "decoder_layers", "encoder_ffn_dim", "decoder_ffn_dim", "encoder_attention_heads",
    "decoder_attention_heads", "d_model", "dropout", "scale_embedding",
    "attention_dropout", "activation_dropout",   # glassformer has neither dropout (training)
    "encoder_layerdrop", "decoder_layerdrop",    # layer dropping (training only)
    "init_std", "num_hidden_layers", "classif_dropout", "classifier_dropout", "_num_labels",
    "output_past", "gradient_checkpointing",     # init, an alias of encoder_layers, heads unused
    "force_bos_token_to_be_generated"}           # a generation setting of old BART configs
READ_KEYS["bart"] = READ_KEYS["marian"] - {"decoder_vocab_size"}
READ_KEYS["mbart"] = READ_KEYS["bart"]
READ_KEYS["qwen2"] = READ_KEYS["llama"] | {"use_sliding_window", "sliding_window",
                                           "max_window_layers", "layer_types"}
READ_KEYS["mistral"] = READ_KEYS["llama"] | {"sliding_window", "layer_types"}
# The keys of each RoPE kind in rope_parameters / rope_scaling (besides rope_type and rope_theta).
ROPE_KEYS = {"default": frozenset(), "linear": frozenset({"factor"}),
             "dynamic": frozenset({"factor"}),
             "llama3": frozenset({"factor", "original_max_position_embeddings",
                                  "low_freq_factor", "high_freq_factor"}),
             "yarn": frozenset({"factor", "original_max_position_embeddings", "attention_factor",
                                "beta_fast", "beta_slow", "mscale", "mscale_all_dim",
                                "truncate"})}


def config_from_hf(hf: dict, *, mlm_head: bool = False):
    """A config.json (as a dict) -> the glassformer config of its family.

    mlm_head: for BERT, the weights hold the masked-LM head (cls.* tensors). A missing required
    key raises KeyError; a key or value that would change the math raises GlassformerError.
    """
    model_type = hf.get("model_type")
    if model_type not in HF_ARCHS:
        raise GlassformerError(f"model_type {model_type!r} is not one glassformer loads "
                               f"(supported: {', '.join(HF_ARCHS)})")
    check_hf_config(hf, model_type)
    arch = HF_ARCHS[model_type]
    if arch == "gpt2":
        return _gpt2_from_hf(hf)
    if arch == "llama":
        return _llama_from_hf(hf)
    if arch == "transformer":
        return _seq2seq_from_hf(hf)
    return _bert_from_hf(hf, mlm_head=mlm_head)


def config_to_hf(cfg) -> dict:
    """A glassformer config -> the config.json of the matching transformers model."""
    arch = arch_of(cfg)
    if arch == "gpt2":
        return _gpt2_to_hf(cfg)
    if arch == "llama":
        return _llama_to_hf(cfg)
    if arch == "transformer":
        return _seq2seq_to_hf(cfg)
    return _bert_to_hf(cfg)


def check_hf_config(hf: dict, model_type: str) -> None:
    """Raise a GlassformerError for a config.json key that could change this model's math."""
    required = {**COMMON_REQUIRED, **REQUIRED_VALUES[model_type]}
    for key, value in hf.items():
        if key in required:
            if value not in required[key]:
                raise GlassformerError(f"config.json has {key}={value!r}, which glassformer does "
                                       f"not implement for {model_type} (supported: "
                                       f"{', '.join(map(repr, required[key]))})")
        elif key not in METADATA_KEYS and key not in READ_KEYS[model_type]:
            raise GlassformerError(f"config.json key {key!r} is unknown to glassformer's "
                                   f"{model_type} loader; it may change the model's math, so "
                                   "glassformer refuses to guess")
    for layer_type in hf.get("layer_types") or ():
        if layer_type not in ("full_attention", "sliding_attention"):
            raise GlassformerError(f"config.json layer_types holds {layer_type!r}; glassformer "
                                   "implements full_attention and sliding_attention only")


def rope_fields_from_hf(hf: dict) -> dict:
    """LlamaConfig's rope_* fields from rope_scaling (transformers 4.x, with a top-level
    rope_theta) or rope_parameters (5.x); rope_scaling wins when both are set, as in
    transformers. Defaults and derived values are transformers' (standardize_rope_params and
    the _compute_*_parameters functions)."""
    rope = hf.get("rope_scaling") or hf.get("rope_parameters") or {}
    name = "rope_scaling" if hf.get("rope_scaling") else "rope_parameters"
    kind = rope.get("rope_type", rope.get("type", "default"))
    if kind not in ROPE_KEYS:
        raise GlassformerError(f"config.json {name} has rope_type {kind!r}; glassformer "
                               f"implements {', '.join(ROPE_KEYS)}")
    extra = sorted(set(rope) - ROPE_KEYS[kind] - {"rope_type", "type", "rope_theta"})
    if extra:
        raise GlassformerError(f"config.json {name} has {extra}, which glassformer's "
                               f"{kind!r} RoPE does not implement")
    fields = {"rope_theta": float(rope.get("rope_theta", hf.get("rope_theta", 10000.0))),
              "rope_type": kind}
    context = hf["max_position_embeddings"]
    original = int(rope.get("original_max_position_embeddings") or context)
    if kind == "default":
        return fields
    factor = rope.get("factor")
    if factor is None and kind == "yarn":
        factor = context / original  # DeepSeek-V3's convention, as transformers reads it
    if factor is None:
        raise GlassformerError(f"config.json {name} asks for {kind} RoPE without a factor")
    fields["rope_factor"] = float(factor)
    if kind == "dynamic":  # max_position_embeddings is where NTK scaling starts
        fields["rope_original_max_seq_len"] = context
    if kind == "llama3":
        missing = sorted({"factor", "low_freq_factor", "high_freq_factor"} - set(rope))
        if missing:
            raise GlassformerError(f"config.json {name} asks for llama3 RoPE without {missing}")
        fields.update(rope_original_max_seq_len=original,
                      rope_low_freq_factor=float(rope["low_freq_factor"]),
                      rope_high_freq_factor=float(rope["high_freq_factor"]))
    if kind == "yarn":
        fields.update(rope_original_max_seq_len=original,
                      rope_beta_fast=float(rope.get("beta_fast") or 32.0),
                      rope_beta_slow=float(rope.get("beta_slow") or 1.0),
                      rope_attention_factor=_yarn_attention_factor(rope, fields["rope_factor"]),
                      rope_truncate=bool(rope.get("truncate", True)))
    return fields


def _yarn_attention_factor(rope: dict, factor: float) -> float | None:
    """attention_factor as given, or from DeepSeek's mscale pair, or None (from factor)."""
    if rope.get("attention_factor") is not None:
        return float(rope["attention_factor"])
    mscale, mscale_all_dim = rope.get("mscale"), rope.get("mscale_all_dim")
    if mscale and mscale_all_dim:
        return yarn_mscale(factor, mscale) / yarn_mscale(factor, mscale_all_dim)
    return None


def rope_parameters_to_hf(cfg: LlamaConfig) -> dict:
    """The rope_parameters dict transformers 5 reads (4.x reads the same as rope_scaling)."""
    params = {"rope_type": cfg.rope_type, "rope_theta": cfg.rope_theta}
    if cfg.rope_type == "default":
        return params
    params["factor"] = cfg.rope_factor
    if cfg.rope_type == "llama3":
        params.update(original_max_position_embeddings=cfg.rope_original_max_seq_len,
                      low_freq_factor=cfg.rope_low_freq_factor,
                      high_freq_factor=cfg.rope_high_freq_factor)
    if cfg.rope_type == "yarn":
        params.update(original_max_position_embeddings=cfg.rope_original_max_seq_len,
                      beta_fast=cfg.rope_beta_fast, beta_slow=cfg.rope_beta_slow,
                      truncate=cfg.rope_truncate)
        if cfg.rope_attention_factor is not None:
            params["attention_factor"] = cfg.rope_attention_factor
    return params


# ---------------------------------------------------------------- GPT-2

def _gpt2_from_hf(hf: dict) -> GPT2Config:
    """A GPT-2 config.json -> GPT2Config (biases on, dropout = resid_pdrop)."""
    dropout = float(hf.get("resid_pdrop", 0.1))
    if float(hf.get("embd_pdrop", dropout)) != dropout:
        raise GlassformerError(f"config.json has embd_pdrop={hf['embd_pdrop']} and resid_pdrop="
                               f"{dropout}; glassformer's GPT-2 uses one dropout for both")
    activation = hf.get("activation_function", "gelu_new")
    return GPT2Config(vocab_size=hf["vocab_size"],
                      max_seq_len=hf.get("n_positions") or hf["n_ctx"],
                      n_layer=hf["n_layer"], n_head=hf["n_head"], d_model=hf["n_embd"],
                      d_ff=hf.get("n_inner"), dropout=dropout, bias=True,
                      tie_embeddings=bool(hf.get("tie_word_embeddings", True)),
                      norm_eps=float(hf.get("layer_norm_epsilon", 1e-5)),
                      activation="gelu_tanh" if activation in TANH_GELUS else activation)


def _gpt2_to_hf(cfg: GPT2Config) -> dict:
    """GPT2Config -> the config.json of an HF GPT2LMHeadModel (biases are written as zeros when
    the config has none, which is the same model)."""
    return {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2",
            "vocab_size": cfg.vocab_size, "n_positions": cfg.max_seq_len, "n_embd": cfg.d_model,
            "n_layer": cfg.n_layer, "n_head": cfg.n_head, "n_inner": cfg.d_ff,
            "activation_function": "gelu_new" if cfg.activation == "gelu_tanh" else cfg.activation,
            "resid_pdrop": cfg.dropout, "embd_pdrop": cfg.dropout, "attn_pdrop": 0.0,
            "layer_norm_epsilon": cfg.norm_eps, "tie_word_embeddings": cfg.tie_embeddings,
            "scale_attn_weights": True, "bos_token_id": None, "eos_token_id": None,
            "dtype": "float32"}


# ---------------------------------------------------------------- LLaMA, Qwen2, Mistral

def _llama_from_hf(hf: dict) -> LlamaConfig:
    """A config.json of model_type llama, qwen2 or mistral -> LlamaConfig.

    Keys that would change the math and that glassformer does not implement (longrope, MLP
    biases, a sliding window shorter than the sequences) raise a GlassformerError.
    A sliding window of W tokens is the same as full attention for sequences of at most W
    tokens, so a Mistral/Qwen2 window caps max_seq_len at W instead. Dynamic NTK RoPE has no
    end: max_seq_len is set to factor x max_position_embeddings.
    """
    rope = rope_fields_from_hf(hf)
    context = _context(hf)
    if rope["rope_type"] == "dynamic":
        context = int(context * rope["rope_factor"])
    n_head = hf["num_attention_heads"]
    attention_bias = bool(hf.get("attention_bias", False))
    head_dim = hf.get("head_dim")
    if head_dim == hf["hidden_size"] // n_head:
        head_dim = None  # the default, stored as such so configs compare equal
    return LlamaConfig(vocab_size=hf["vocab_size"], max_seq_len=context,
                       n_layer=hf["num_hidden_layers"], n_head=n_head,
                       n_kv_head=hf.get("num_key_value_heads") or n_head,
                       d_model=hf["hidden_size"], d_ff=hf["intermediate_size"],
                       norm_eps=float(hf.get("rms_norm_eps", 1e-6)),
                       qkv_bias=hf["model_type"] == "qwen2" or attention_bias,
                       out_bias=attention_bias,
                       tie_embeddings=bool(hf.get("tie_word_embeddings", False)),
                       head_dim=head_dim, **rope)


def _context(hf: dict) -> int:
    """max_position_embeddings, capped by a sliding window when one is in use."""
    context = hf["max_position_embeddings"]
    window = hf.get("sliding_window")
    in_use = hf.get("use_sliding_window", hf.get("model_type") == "mistral")
    if in_use and window is not None:
        context = min(context, int(window))
    return context


def _llama_to_hf(cfg: LlamaConfig) -> dict:
    """The config.json transformers needs to rebuild this model (llama, or qwen2)."""
    if cfg.qkv_bias and not cfg.out_bias:
        model_type, extra = "qwen2", {"use_sliding_window": False, "sliding_window": None}
    elif cfg.qkv_bias == cfg.out_bias:
        model_type, extra = "llama", {"attention_bias": cfg.qkv_bias, "mlp_bias": False}
    else:
        raise GlassformerError("no Hugging Face family has an attention output bias without "
                               "q/k/v biases (out_bias=True, qkv_bias=False)")
    bcfg = cfg.block_config()
    architecture = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM"}[model_type]
    rope = rope_parameters_to_hf(cfg)
    scaling = {} if cfg.rope_type == "default" else {"rope_scaling": rope}
    # dynamic NTK scales from max_position_embeddings on: it is the original context there
    dynamic = cfg.rope_type == "dynamic"
    context = cfg.rope_original_max_seq_len if dynamic else cfg.max_seq_len
    return {"architectures": [architecture], "model_type": model_type,
            "vocab_size": cfg.vocab_size, "hidden_size": cfg.d_model,
            "intermediate_size": cfg.hidden, "num_hidden_layers": cfg.n_layer,
            "num_attention_heads": cfg.n_head, "num_key_value_heads": bcfg.kv_heads,
            "head_dim": bcfg.dim_per_head, "max_position_embeddings": context,
            "rms_norm_eps": cfg.norm_eps, "hidden_act": "silu",
            # transformers 5 reads rope_parameters, 4.x reads rope_theta (and rope_scaling)
            "rope_theta": cfg.rope_theta, "rope_parameters": rope, **scaling,
            "tie_word_embeddings": cfg.tie_embeddings, "attention_dropout": 0.0,
            "dtype": "float32", **extra}


# ---------------------------------------------------------------- BERT

def _bert_from_hf(hf: dict, *, mlm_head: bool = False) -> BertConfig:
    """A config.json of model_type bert -> BertConfig (mlm_head: the weights have cls.*)."""
    if mlm_head and not hf.get("tie_word_embeddings", True):
        raise GlassformerError("config.json unties the MLM decoder from the word embeddings "
                               "(tie_word_embeddings=false); glassformer ties them")
    act = hf.get("hidden_act", "gelu")
    return BertConfig(vocab_size=hf["vocab_size"], max_seq_len=hf["max_position_embeddings"],
                      n_types=hf.get("type_vocab_size", 2), n_layer=hf["num_hidden_layers"],
                      n_head=hf["num_attention_heads"], d_model=hf["hidden_size"],
                      d_ff=hf["intermediate_size"],
                      norm_eps=float(hf.get("layer_norm_eps", 1e-12)),
                      dropout=float(hf.get("hidden_dropout_prob", 0.1)),
                      activation="gelu_tanh" if act in TANH_GELUS else "gelu", mlm_head=mlm_head)


def _bert_to_hf(cfg: BertConfig) -> dict:
    """The config.json of the matching HF BertModel (or BertForMaskedLM with mlm_head)."""
    return {"architectures": ["BertForMaskedLM" if cfg.mlm_head else "BertModel"],
            "model_type": "bert", "vocab_size": cfg.vocab_size,
            "hidden_size": cfg.d_model, "num_hidden_layers": cfg.n_layer,
            "num_attention_heads": cfg.n_head,
            "intermediate_size": cfg.block_config().hidden,
            "hidden_act": "gelu" if cfg.activation == "gelu" else "gelu_new",
            "max_position_embeddings": cfg.max_seq_len, "type_vocab_size": cfg.n_types,
            "layer_norm_eps": cfg.norm_eps, "hidden_dropout_prob": cfg.dropout,
            "attention_probs_dropout_prob": 0.0, "position_embedding_type": "absolute",
            "tie_word_embeddings": True, "dtype": "float32"}


# ---------------------------------------------------------------- Marian and BART

def _seq2seq_from_hf(hf: dict) -> Seq2SeqConfig:
    """A config.json of model_type marian or bart -> Seq2SeqConfig.

    Marian: fixed [sin | cos] positions, optional sqrt(C) scaling, no embedding norm.
    BART: learned positions whose table starts 2 rows early, LayerNorm on the embeddings.
    mBART: BART in pre-norm with a final norm per stack; its decoder starts from a language code
    (transformers' shift_tokens_right), so without decoder_start_token_id the start id is </s>
    and decoder_input_ids should be given. All: post-norm (mBART: pre-norm), LayerNorm eps 1e-5 (torch's default), a final_logits_bias, one shared
    embedding. The encoder and decoder must agree in width, heads and MLP size.
    """
    marian = hf["model_type"] == "marian"
    for enc, dec in (("encoder_attention_heads", "decoder_attention_heads"),
                     ("encoder_ffn_dim", "decoder_ffn_dim")):
        if hf[enc] != hf[dec]:
            raise GlassformerError(f"config.json has {enc}={hf[enc]} but {dec}={hf[dec]}; "
                                   "glassformer's encoder-decoder uses one value for both")
    if marian and hf.get("decoder_vocab_size", hf["vocab_size"]) != hf["vocab_size"]:
        raise GlassformerError(f"config.json has decoder_vocab_size={hf['decoder_vocab_size']} "
                               f"but vocab_size={hf['vocab_size']}; glassformer shares one "
                               "vocabulary")
    hf = dict(hf)
    if hf["model_type"] == "mbart" and hf.get("decoder_start_token_id") is None:
        hf["decoder_start_token_id"] = hf.get("eos_token_id")
    for key in ("pad_token_id", "eos_token_id", "decoder_start_token_id"):
        if hf.get(key) is None:
            raise GlassformerError(f"config.json lacks {key}, which the encoder-decoder needs")
    return Seq2SeqConfig(vocab_size=hf["vocab_size"], max_seq_len=hf["max_position_embeddings"],
                         n_layer=hf["encoder_layers"], n_dec_layer=hf["decoder_layers"],
                         n_head=hf["encoder_attention_heads"], d_model=hf["d_model"],
                         d_ff=hf["encoder_ffn_dim"], norm_eps=1e-5,
                         norm_position="pre" if hf["model_type"] == "mbart" else "post",
                         activation=SEQ2SEQ_ACTIVATIONS[hf.get("activation_function", "gelu")],
                         positions="sinusoidal" if marian else "learned",
                         pos_offset=0 if marian else 2,
                         scale_embedding=bool(hf.get("scale_embedding", False)),
                         emb_norm=not marian, share_embeddings=True,
                         tie_embeddings=True, logits_bias=True, dropout=float(hf.get("dropout", 0.1)),
                         pad_id=hf["pad_token_id"], eos_id=hf["eos_token_id"],
                         decoder_start_id=hf["decoder_start_token_id"])


def _seq2seq_to_hf(cfg: Seq2SeqConfig) -> dict:
    """The config.json of the HF model computing the same function as `cfg`: MarianMTModel for
    fixed positions (the paper's arrangement, as our runs train), BartForConditionalGeneration
    (post-norm) or MBartForConditionalGeneration (pre-norm) for learned positions at offset 2
    with an embedding norm. Each needs one shared, tied embedding and LayerNorm eps 1e-5 (a
    missing logits bias is written as zeros by save_pretrained)."""
    if cfg.positions == "sinusoidal":
        model_type = "marian"
        wanted = ((cfg.norm_position != "post", "norm_position='post'"),
                  (cfg.emb_norm, "emb_norm=False"))
    else:
        model_type = "bart" if cfg.norm_position == "post" else "mbart"
        wanted = ((cfg.pos_offset != 2, "pos_offset=2"), (not cfg.emb_norm, "emb_norm=True"))
    wanted += ((not cfg.share_embeddings, "share_embeddings=True"),
               (not cfg.tie_embeddings, "tie_embeddings=True"),
               (cfg.norm_eps != 1e-5, "norm_eps=1e-5"))
    problems = [text for bad, text in wanted if bad]
    name = {"marian": "Marian", "bart": "BART", "mbart": "mBART"}[model_type]
    if problems:
        raise GlassformerError(f"a {name} folder needs " + ", ".join(problems) +
                               "; this encoder-decoder differs")
    architecture = {"marian": "MarianMTModel", "bart": "BartForConditionalGeneration",
                    "mbart": "MBartForConditionalGeneration"}[model_type]
    activation = {"relu": "relu", "gelu": "gelu", "gelu_tanh": "gelu_new",
                  "silu": "swish"}[cfg.activation]
    hidden = cfg.block_config().hidden
    config = {"architectures": [architecture], "model_type": model_type,
              "vocab_size": cfg.vocab_size, "max_position_embeddings": cfg.max_seq_len,
              "d_model": cfg.d_model, "encoder_layers": cfg.n_layer,
              "decoder_layers": cfg.decoder_layers, "encoder_attention_heads": cfg.n_head,
              "decoder_attention_heads": cfg.n_head, "encoder_ffn_dim": hidden,
              "decoder_ffn_dim": hidden, "activation_function": activation,
              "scale_embedding": cfg.scale_embedding, "tie_word_embeddings": True,
              "dropout": cfg.dropout, "attention_dropout": 0.0, "activation_dropout": 0.0,
              "is_encoder_decoder": True, "pad_token_id": cfg.pad_id, "eos_token_id": cfg.eos_id,
              "decoder_start_token_id": cfg.decoder_start_id, "forced_eos_token_id": cfg.eos_id,
              "bos_token_id": None, "dtype": "float32"}
    if model_type == "marian":
        config.update(decoder_vocab_size=cfg.vocab_size, share_encoder_decoder_embeddings=True)
    return config
