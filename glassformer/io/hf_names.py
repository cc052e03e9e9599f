"""Hugging Face state dicts <-> glassformer params: one rename table per family, and config keys.

The only module that knows Hugging Face's tensor names. Each table row pairs a glassformer name
with an HF key ("{i}" stands for the layer index) and says whether to transpose:

    torch nn.Linear (LLaMA, Qwen2, Mistral, BERT) stores W as (out, in)  -> transpose to (in, out)
    GPT-2's Conv1D stores W as (in, out), glassformer's layout already  -> no transpose
    GPT-2's fused c_attn (C, 3C) holds [W_q | W_k | W_v] side by side -> split into wq, wk, wv

Base-model keys carry a prefix in the *ForCausalLM / *ForMaskedLM files ("transformer.", "model.",
"bert.") and none in bare-model files; both are accepted. A tied head has no tensor of its own:
`lm_head.weight` (or BERT's MLM decoder) is absent or an exact copy of the embedding.
Keys listed in `FamilyNames.ignored` are buffers (masks, position ids, RoPE frequencies) or heads
glassformer does not compute (BERT's pooler and next-sentence head); every other key must map.

Config keys: `check_hf_config` accepts a config.json only if every key is known, either as one a
family reads, as harmless metadata (`METADATA_KEYS`), or as a switch set to the one value
glassformer implements (`REQUIRED_VALUES`). An unknown key may change the math, so it is an error.
"""
from __future__ import annotations

import re
from typing import NamedTuple

import numpy as np

from glassformer.blocks.config import BlockConfig
from glassformer.errors import CheckpointError, GlassformerError


class Rename(NamedTuple):
    ours: str            # glassformer name, "{i}" for the layer index
    theirs: str          # HF key without the base-model prefix, same "{i}"
    transpose: bool      # nn.Linear (out, in) <-> glassformer (in, out)


class Split(NamedTuple):
    ours: tuple[str, ...]  # glassformer names of the equal parts, in order
    theirs: str            # one HF tensor holding the parts side by side on its last axis


class FamilyNames(NamedTuple):
    prefix: str               # the base model's key prefix in task-model files
    outside: tuple            # key starts of task heads, which never carry the prefix
    top: tuple                # Rename rows outside the layers
    layer: tuple              # Rename / Split rows of layer {i}
    tied: dict                # HF key -> HF key it must equal when the head is tied
    ignored: tuple            # regexes of HF keys that are skipped on load


GPT2 = FamilyNames(
    prefix="transformer.",
    outside=("lm_head.",),
    top=(Rename("tok_emb", "wte.weight", False),
         Rename("pos_emb", "wpe.weight", False),
         Rename("norm_f.w", "ln_f.weight", False),
         Rename("norm_f.b", "ln_f.bias", False),
         Rename("lm_head", "lm_head.weight", True)),
    layer=(Rename("norm1.w", "h.{i}.ln_1.weight", False),
           Rename("norm1.b", "h.{i}.ln_1.bias", False),
           Split(("attn.wq", "attn.wk", "attn.wv"), "h.{i}.attn.c_attn.weight"),
           Split(("attn.bq", "attn.bk", "attn.bv"), "h.{i}.attn.c_attn.bias"),
           Rename("attn.wo", "h.{i}.attn.c_proj.weight", False),
           Rename("attn.bo", "h.{i}.attn.c_proj.bias", False),
           Rename("norm2.w", "h.{i}.ln_2.weight", False),
           Rename("norm2.b", "h.{i}.ln_2.bias", False),
           Rename("mlp.w_up", "h.{i}.mlp.c_fc.weight", False),
           Rename("mlp.b_up", "h.{i}.mlp.c_fc.bias", False),
           Rename("mlp.w_down", "h.{i}.mlp.c_proj.weight", False),
           Rename("mlp.b_down", "h.{i}.mlp.c_proj.bias", False)),
    tied={"lm_head.weight": "wte.weight"},
    ignored=(r"h\.\d+\.attn\.(bias|masked_bias)",))   # causal-mask buffers of old checkpoints

LLAMA = FamilyNames(
    prefix="model.",
    outside=("lm_head.",),
    top=(Rename("tok_emb", "embed_tokens.weight", False),
         Rename("norm_f.w", "norm.weight", False),
         Rename("lm_head", "lm_head.weight", True)),
    layer=(Rename("norm1.w", "layers.{i}.input_layernorm.weight", False),
           Rename("attn.wq", "layers.{i}.self_attn.q_proj.weight", True),
           Rename("attn.bq", "layers.{i}.self_attn.q_proj.bias", False),
           Rename("attn.wk", "layers.{i}.self_attn.k_proj.weight", True),
           Rename("attn.bk", "layers.{i}.self_attn.k_proj.bias", False),
           Rename("attn.wv", "layers.{i}.self_attn.v_proj.weight", True),
           Rename("attn.bv", "layers.{i}.self_attn.v_proj.bias", False),
           Rename("attn.wo", "layers.{i}.self_attn.o_proj.weight", True),
           Rename("attn.bo", "layers.{i}.self_attn.o_proj.bias", False),
           Rename("norm2.w", "layers.{i}.post_attention_layernorm.weight", False),
           Rename("mlp.w_gate", "layers.{i}.mlp.gate_proj.weight", True),
           Rename("mlp.w_up", "layers.{i}.mlp.up_proj.weight", True),
           Rename("mlp.w_down", "layers.{i}.mlp.down_proj.weight", True)),
    tied={"lm_head.weight": "embed_tokens.weight"},
    ignored=(r"layers\.\d+\.self_attn\.rotary_emb\.inv_freq",))

BERT = FamilyNames(
    prefix="bert.",
    outside=("cls.",),
    top=(Rename("tok_emb", "embeddings.word_embeddings.weight", False),
         Rename("pos_emb", "embeddings.position_embeddings.weight", False),
         Rename("type_emb", "embeddings.token_type_embeddings.weight", False),
         Rename("emb_norm.w", "embeddings.LayerNorm.weight", False),
         Rename("emb_norm.b", "embeddings.LayerNorm.bias", False),
         Rename("mlm.w", "cls.predictions.transform.dense.weight", True),
         Rename("mlm.b", "cls.predictions.transform.dense.bias", False),
         Rename("mlm.norm.w", "cls.predictions.transform.LayerNorm.weight", False),
         Rename("mlm.norm.b", "cls.predictions.transform.LayerNorm.bias", False),
         Rename("mlm.bias", "cls.predictions.bias", False)),
    layer=(Rename("attn.wq", "encoder.layer.{i}.attention.self.query.weight", True),
           Rename("attn.bq", "encoder.layer.{i}.attention.self.query.bias", False),
           Rename("attn.wk", "encoder.layer.{i}.attention.self.key.weight", True),
           Rename("attn.bk", "encoder.layer.{i}.attention.self.key.bias", False),
           Rename("attn.wv", "encoder.layer.{i}.attention.self.value.weight", True),
           Rename("attn.bv", "encoder.layer.{i}.attention.self.value.bias", False),
           Rename("attn.wo", "encoder.layer.{i}.attention.output.dense.weight", True),
           Rename("attn.bo", "encoder.layer.{i}.attention.output.dense.bias", False),
           Rename("norm1.w", "encoder.layer.{i}.attention.output.LayerNorm.weight", False),
           Rename("norm1.b", "encoder.layer.{i}.attention.output.LayerNorm.bias", False),
           Rename("mlp.w_up", "encoder.layer.{i}.intermediate.dense.weight", True),
           Rename("mlp.b_up", "encoder.layer.{i}.intermediate.dense.bias", False),
           Rename("mlp.w_down", "encoder.layer.{i}.output.dense.weight", True),
           Rename("mlp.b_down", "encoder.layer.{i}.output.dense.bias", False),
           Rename("norm2.w", "encoder.layer.{i}.output.LayerNorm.weight", False),
           Rename("norm2.b", "encoder.layer.{i}.output.LayerNorm.bias", False)),
    # The MLM decoder is tok_emb^T plus cls.predictions.bias; files may repeat both.
    tied={"cls.predictions.decoder.weight": "embeddings.word_embeddings.weight",
          "cls.predictions.decoder.bias": "cls.predictions.bias"},
    ignored=(r"embeddings\.(position_ids|token_type_ids)",   # index buffers
             r"pooler\.dense\.(weight|bias)",                # [CLS] pooler: unused by mean pooling
             r"cls\.seq_relationship\.(weight|bias)"))        # next-sentence head

NAMES = {"gpt2": GPT2, "llama": LLAMA, "bert": BERT}


def family_names(arch: str) -> FamilyNames:
    if arch not in NAMES:
        raise GlassformerError(f"no Hugging Face name table for arch {arch!r}; known: "
                               f"{sorted(NAMES)}")
    return NAMES[arch]


# ---------------------------------------------------------------- shapes and renaming

def glassformer_shapes(arch: str, cfg) -> dict[str, tuple[int, ...]]:
    """The name and shape of every glassformer param of a model of this config."""
    bcfg = cfg.block_config()
    c, v = cfg.d_model, cfg.vocab_size
    shapes = {"tok_emb": (v, c)}                                     # (V, C)
    if arch in ("gpt2", "bert"):
        shapes["pos_emb"] = (cfg.max_seq_len, c)                     # (T_max, C)
    if arch == "bert":
        shapes.update({"type_emb": (cfg.n_types, c), "emb_norm.w": (c,), "emb_norm.b": (c,)})
    for i in range(cfg.n_layer):
        shapes.update({f"blocks.{i}.{name}": shape for name, shape in _block_shapes(bcfg).items()})
    if arch != "bert":
        shapes["norm_f.w"] = (c,)
        if bcfg.norm == "layer" and bcfg.norm_bias:
            shapes["norm_f.b"] = (c,)
        if not cfg.tie_embeddings:
            shapes["lm_head"] = (c, v)                               # (C, V)
    if arch == "bert" and cfg.mlm_head:
        shapes.update({"mlm.w": (c, c), "mlm.b": (c,), "mlm.norm.w": (c,), "mlm.norm.b": (c,),
                       "mlm.bias": (v,)})
    return shapes


def _block_shapes(bcfg: BlockConfig) -> dict[str, tuple[int, ...]]:
    """Param shapes of one layer, block-local names (as blocks/residual.py init_block makes)."""
    c, f = bcfg.d_model, bcfg.hidden
    q, kv = bcfg.n_head * bcfg.dim_per_head, bcfg.kv_heads * bcfg.dim_per_head   # H*D, K*D
    shapes = {"norm1.w": (c,), "attn.wq": (c, q), "attn.wk": (c, kv), "attn.wv": (c, kv),
              "attn.wo": (q, c), "norm2.w": (c,), "mlp.w_up": (c, f), "mlp.w_down": (f, c)}
    if bcfg.norm == "layer" and bcfg.norm_bias:
        shapes.update({"norm1.b": (c,), "norm2.b": (c,)})
    if bcfg.qkv_bias:
        shapes.update({"attn.bq": (q,), "attn.bk": (kv,), "attn.bv": (kv,)})
    if bcfg.out_bias:
        shapes["attn.bo"] = (c,)
    if bcfg.mlp == "swiglu":
        shapes["mlp.w_gate"] = (c, f)
    if bcfg.mlp_bias:
        shapes.update({"mlp.b_up": (f,), "mlp.b_down": (c,)})
    return shapes


def _rows(names: FamilyNames, n_layer: int) -> list:
    """Every table row with "{i}" filled in, layer rows prefixed with "blocks.{i}."."""
    rows = list(names.top)
    for i in range(n_layer):
        for row in names.layer:
            if isinstance(row, Split):
                rows.append(Split(tuple(f"blocks.{i}.{o}" for o in row.ours),
                                  row.theirs.format(i=i)))
            else:
                rows.append(Rename(f"blocks.{i}.{row.ours}", row.theirs.format(i=i),
                                   row.transpose))
    return rows


def hf_shapes(arch: str, cfg) -> dict[str, tuple[int, ...]]:
    """The HF keys (without prefix) and shapes a checkpoint of this config must hold."""
    ours = glassformer_shapes(arch, cfg)
    shapes = {}
    for row in _rows(family_names(arch), cfg.n_layer):
        if isinstance(row, Split):
            if row.ours[0] in ours:
                parts = [ours[name] for name in row.ours]
                shapes[row.theirs] = parts[0][:-1] + (sum(p[-1] for p in parts),)
        elif row.ours in ours:
            shape = ours[row.ours]
            shapes[row.theirs] = shape[::-1] if row.transpose else shape
    return shapes


def to_glassformer(arch: str, cfg, tensors: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """HF tensors (keys without prefix, already checked by shape) -> glassformer params.

    Every array is contiguous float32 in glassformer's (in, out) layout: transposed weights stay a
    column-major view of the file's (out, in) rows, others are row-major; a copy only when split
    or widened, else the tensor itself (a copy-on-write memory map when read from a file).
    """
    params = {}
    for row in _rows(family_names(arch), cfg.n_layer):
        if row.theirs not in tensors:
            continue
        tensor = tensors[row.theirs]
        if isinstance(row, Split):
            parts = np.split(tensor, len(row.ours), axis=-1)     # (C, 3C) -> 3 x (C, C)
            for name, part in zip(row.ours, parts):
                params[name] = np.ascontiguousarray(part, dtype=np.float32)
        elif row.transpose:
            # (out, in) -> (in, out) as a view: column-major, no copy for float32, and the
            # order that decoding's matrix-vector products x @ W stream fastest
            params[row.ours] = np.asfortranarray(tensor.T, dtype=np.float32)
        else:
            params[row.ours] = np.ascontiguousarray(tensor, dtype=np.float32)
    return params


def to_hf(arch: str, cfg, params: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """glassformer params -> HF tensors: torch layouts, base-model keys with the task prefix."""
    names = family_names(arch)
    # A bare BertModel file has no prefix; a BertForMaskedLM one nests the encoder under "bert."
    prefix = "" if arch == "bert" and not cfg.mlm_head else names.prefix
    tensors = {}
    for row in _rows(names, cfg.n_layer):
        if isinstance(row, Split):
            if row.ours[0] not in params:
                continue
            array = np.concatenate([params[name] for name in row.ours], axis=-1)  # -> (C, 3C)
        elif row.ours in params:
            array = params[row.ours].T if row.transpose else params[row.ours]  # -> (out, in)
        else:
            continue
        key = row.theirs if row.theirs.startswith(names.outside) else prefix + row.theirs
        tensors[key] = np.ascontiguousarray(array, dtype=np.float32)
    return tensors


def hf_keys_by_table_name(arch: str, keys) -> dict[str, str]:
    """File keys -> {table key: file key}: prefix removed, ignored buffers and heads dropped."""
    names = family_names(arch)
    ignored = re.compile("|".join(names.ignored))
    table = {}
    for key in keys:
        name = key[len(names.prefix):] if key.startswith(names.prefix) else key
        if ignored.fullmatch(name):
            continue
        if name in table:
            raise CheckpointError(f"tensor {name!r} appears twice, as {table[name]!r} and {key!r}")
        table[name] = key
    return table


# ---------------------------------------------------------------- config.json keys

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
REQUIRED_VALUES = {
    "gpt2": {"scale_attn_weights": (True,), "scale_attn_by_inverse_layer_idx": (False,),
             "activation_function": ("gelu_new", "gelu_pytorch_tanh", "gelu_fast", "gelu",
                                     "relu")},
    "llama": {"hidden_act": ("silu",), "mlp_bias": (False,), "rope_interleaved": (False, None)},
    "qwen2": {"hidden_act": ("silu",), "use_mrope": (False, None)},
    "mistral": {"hidden_act": ("silu",)},
    "bert": {"hidden_act": ("gelu", "gelu_new", "gelu_pytorch_tanh"),
             "position_embedding_type": ("absolute",)},
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
READ_KEYS["qwen2"] = READ_KEYS["llama"] | {"use_sliding_window", "sliding_window",
                                           "max_window_layers", "layer_types"}
READ_KEYS["mistral"] = READ_KEYS["llama"] | {"sliding_window", "layer_types"}
ROPE_KEYS = frozenset({"rope_type", "type", "rope_theta"})


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


def rope_theta_from_hf(hf: dict) -> float:
    """RoPE base from rope_parameters (transformers 5) or rope_theta (4.x); plain RoPE only."""
    params = hf.get("rope_parameters") or {}
    for name, rope in (("rope_parameters", params), ("rope_scaling", hf.get("rope_scaling"))):
        if rope is None:
            continue
        kind = rope.get("rope_type", rope.get("type", "default"))
        extra = sorted(set(rope) - ROPE_KEYS)
        if kind != "default" or extra:
            raise GlassformerError(f"config.json {name}={rope!r} asks for RoPE scaling; "
                                   "glassformer implements plain RoPE (rope_type 'default') only")
    return float(params.get("rope_theta", hf.get("rope_theta", 10000.0)))


# ---------------------------------------------------------------- GPT-2 config (gpt2.py is HF-free)

TANH_GELUS = ("gelu_new", "gelu_pytorch_tanh", "gelu_fast")  # three spellings of tanh GELU


def gpt2_config_from_hf(hf: dict):
    """A GPT-2 config.json -> GPT2Config (biases on, dropout = resid_pdrop)."""
    from glassformer.models.gpt2 import GPT2Config
    check_hf_config(hf, "gpt2")
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


def gpt2_config_to_hf(cfg) -> dict:
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
