"""The encoder-decoder in Hugging Face form: model_types marian, bart and mbart
(MarianMTModel, BartForConditionalGeneration, MBartForConditionalGeneration files).

    Marian: fixed [sin | cos] positions, optional sqrt(C) scaling, no embedding norm, post-norm.
    BART:   learned positions whose table starts 2 rows early, LayerNorm on the embeddings.
    mBART:  BART in pre-norm, with a final LayerNorm after each stack; its decoder starts from a
            language code (transformers' shift_tokens_right), so without decoder_start_token_id
            the start id is </s> and decoder_input_ids should be given.
All: LayerNorm eps 1e-5 (torch's default), a final_logits_bias, one shared embedding; encoder and
decoder agree in width, heads and MLP size. Older Marian files store their fixed position tables
(checked against ours, then dropped); a bare BartModel file has no final_logits_bias (zeros).
"""
from __future__ import annotations

from functools import partial

from glassformer.errors import GlassformerError
from glassformer.io.hf.records import (LM_HEAD, FamilyNames, HFFamily, ModelType, Rename,
                                       Squeeze, attention, linear, norm)
from glassformer.models.seq2seq import Seq2SeqConfig


def _layer(side: str, cross: bool) -> tuple:
    """One Marian/BART layer: self_attn (+ encoder_attn), fc1/fc2 and their norms."""
    layer = f"{side}.layers.{{i}}"

    def projections(block: str, ours: str) -> tuple:
        return attention(*(f"{layer}.{block}.{x}" for x in ("q_proj", "k_proj", "v_proj",
                                                              "out_proj")), ours=ours)

    rows = projections("self_attn", "attn") + norm("norm1", f"{layer}.self_attn_layer_norm")
    if cross:
        rows += (projections("encoder_attn", "cross")
                 + norm("norm_cross", f"{layer}.encoder_attn_layer_norm"))
    return rows + (*linear("mlp.w_up", "mlp.b_up", f"{layer}.fc1"),
                   *linear("mlp.w_down", "mlp.b_down", f"{layer}.fc2"),
                   *norm("norm2", f"{layer}.final_layer_norm"))


# Marian and BART share one naming; a row whose param the config lacks (BART's positions in a
# Marian model) is skipped.
NAMES = FamilyNames(
    prefix="model.",
    outside=("lm_head.", "final_logits_bias"),
    top=(Rename("tok_emb", "shared.weight", False),
         Rename("enc.tok_emb", "encoder.embed_tokens.weight", False),
         Rename("enc.pos_emb", "encoder.embed_positions.weight", False),
         *norm("enc.emb_norm", "encoder.layernorm_embedding"),
         *norm("enc.norm_f", "encoder.layer_norm"),
         Rename("dec.pos_emb", "decoder.embed_positions.weight", False),
         *norm("dec.emb_norm", "decoder.layernorm_embedding"),
         *norm("dec.norm_f", "decoder.layer_norm"),
         LM_HEAD,
         Squeeze("logits_bias", "final_logits_bias")),
    layer=_layer("encoder", cross=False),
    tied={"encoder.embed_tokens.weight": "shared.weight",
          "decoder.embed_tokens.weight": "shared.weight", "lm_head.weight": "shared.weight"},
    ignored=(),
    layer_ours="enc.blocks.{i}.",
    dec_layer=_layer("decoder", cross=True))

# Activations as transformers' ACT2FN spells them (the hub's opus-mt models: swish).
ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "gelu_new": "gelu_tanh",
               "gelu_pytorch_tanh": "gelu_tanh", "gelu_fast": "gelu_tanh",
               "swish": "silu", "silu": "silu"}
ACTIVATIONS_TO_HF = {"relu": "relu", "gelu": "gelu", "gelu_tanh": "gelu_new", "silu": "swish"}
# Switches shared by the three (the legacy keys of older configs, such as normalize_before,
# which today's transformers reads as these fixed architectures).
REQUIRED = {"is_encoder_decoder": (True,), "activation_function": tuple(ACTIVATIONS),
            "normalize_before": (False,), "add_final_layer_norm": (False,),
            "add_bias_logits": (False,),
            # transformers 5 unties then the encoder's, decoder's and shared embeddings too
            # (four tables); glassformer's encoder-decoder shares one
            "tie_word_embeddings": (True,)}
BART_READS = frozenset({
    "vocab_size", "max_position_embeddings", "encoder_layers",
    "decoder_layers", "encoder_ffn_dim", "decoder_ffn_dim", "encoder_attention_heads",
    "decoder_attention_heads", "d_model", "dropout", "scale_embedding",
    "attention_dropout", "activation_dropout",   # glassformer has neither dropout (training)
    "encoder_layerdrop", "decoder_layerdrop",    # layer dropping (training only)
    "init_std", "num_hidden_layers", "classif_dropout", "classifier_dropout", "_num_labels",
    "output_past", "gradient_checkpointing",     # init, an alias of encoder_layers, heads unused
    "force_bos_token_to_be_generated"})          # a generation setting of old BART configs


def from_hf(hf: dict, *, marian: bool = False, pre_norm: bool = False,
            logits_bias: bool = True) -> Seq2SeqConfig:
    """A config.json of model_type marian, bart or mbart -> Seq2SeqConfig.

    marian: fixed positions and no embedding norm (else BART's learned positions at offset 2 and
    embedding norm). pre_norm: mBART's pre-norm stacks, whose decoder start defaults to </s>.
    logits_bias: the file has final_logits_bias (a bare BartModel file has none).
    """
    if hf.get("decoder_vocab_size", hf["vocab_size"]) != hf["vocab_size"]:   # Marian's key
        raise GlassformerError(f"config.json has decoder_vocab_size={hf['decoder_vocab_size']} "
                               f"but vocab_size={hf['vocab_size']}; glassformer shares one "
                               "vocabulary")
    hf = dict(hf)
    if pre_norm and hf.get("decoder_start_token_id") is None:
        hf["decoder_start_token_id"] = hf.get("eos_token_id")
    for key in ("pad_token_id", "eos_token_id", "decoder_start_token_id"):
        if hf.get(key) is None:
            raise GlassformerError(f"config.json lacks {key}, which the encoder-decoder needs")
    return Seq2SeqConfig(vocab_size=hf["vocab_size"], max_seq_len=hf["max_position_embeddings"],
                         n_layer=hf["encoder_layers"], n_dec_layer=hf["decoder_layers"],
                         n_head=hf["encoder_attention_heads"], d_model=hf["d_model"],
                         d_ff=hf["encoder_ffn_dim"], norm_eps=1e-5,
                         n_dec_head=_decoder_value(hf, "attention_heads"),
                         d_dec_ff=_decoder_value(hf, "ffn_dim"),
                         norm_position="pre" if pre_norm else "post",
                         activation=ACTIVATIONS[hf.get("activation_function", "gelu")],
                         positions="sinusoidal" if marian else "learned",
                         pos_offset=0 if marian else 2,
                         scale_embedding=bool(hf.get("scale_embedding", False)),
                         emb_norm=not marian, share_embeddings=True, tie_embeddings=True,
                         logits_bias=logits_bias, dropout=float(hf.get("dropout", 0.1)),
                         pad_id=hf["pad_token_id"], eos_id=hf["eos_token_id"],
                         decoder_start_id=hf["decoder_start_token_id"])


def _decoder_value(hf: dict, key: str) -> int | None:
    """decoder_<key> when it differs from encoder_<key> (distilled models), else None: the
    config then says "the encoder's", as a model with one shape always did."""
    value = hf[f"decoder_{key}"]
    return None if value == hf[f"encoder_{key}"] else value


MARIAN = ModelType(
    "marian", "transformer", "MarianMTModel", BART_READS | {"decoder_vocab_size"},
    required={**REQUIRED, "static_position_embeddings": (True,),
              "normalize_embedding": (False,), "share_encoder_decoder_embeddings": (True,)},
    from_hf=partial(from_hf, marian=True))
BART = ModelType(
    "bart", "transformer", "BartForConditionalGeneration", BART_READS,
    required={**REQUIRED, "static_position_embeddings": (False,),
              "normalize_embedding": (True,), "extra_pos_embeddings": (2,)},
    from_hf=from_hf)
MBART = ModelType(
    "mbart", "transformer", "MBartForConditionalGeneration", BART_READS,
    required={**REQUIRED, "normalize_before": (True,), "add_final_layer_norm": (True,),
              "static_position_embeddings": (False,), "normalize_embedding": (True,)},
    from_hf=partial(from_hf, pre_norm=True))
TITLES = {"marian": "Marian", "bart": "BART", "mbart": "mBART"}   # as messages name them


def to_hf(cfg: Seq2SeqConfig) -> dict:
    """The config.json of the HF model computing the same function as `cfg`: MarianMTModel for
    fixed positions (the paper's arrangement, as our runs train), BartForConditionalGeneration
    (post-norm) or MBartForConditionalGeneration (pre-norm) for learned positions at offset 2
    with an embedding norm. Each needs one shared, tied embedding and LayerNorm eps 1e-5 (a
    missing logits bias is written as zeros by save_pretrained)."""
    if cfg.positions == "sinusoidal":
        model_type = MARIAN
        wanted = ((cfg.norm_position != "post", "norm_position='post'"),
                  (cfg.emb_norm, "emb_norm=False"))
    else:
        model_type = BART if cfg.norm_position == "post" else MBART
        wanted = ((cfg.pos_offset != 2, "pos_offset=2"), (not cfg.emb_norm, "emb_norm=True"))
    wanted += ((not cfg.share_embeddings, "share_embeddings=True"),
               (not cfg.tie_embeddings, "tie_embeddings=True"),
               (cfg.norm_eps != 1e-5, "norm_eps=1e-5"))
    problems = [text for bad, text in wanted if bad]
    if problems:
        raise GlassformerError(f"a {TITLES[model_type.name]} folder needs " + ", ".join(problems) +
                               "; this encoder-decoder differs")
    enc, dec = cfg.block_config(), cfg.block_config("dec")
    config = {"architectures": [model_type.hf_class], "model_type": model_type.name,
              "vocab_size": cfg.vocab_size, "max_position_embeddings": cfg.max_seq_len,
              "d_model": cfg.d_model, "encoder_layers": cfg.n_layer,
              "decoder_layers": cfg.decoder_layers, "encoder_attention_heads": enc.n_head,
              "decoder_attention_heads": dec.n_head, "encoder_ffn_dim": enc.hidden,
              "decoder_ffn_dim": dec.hidden, "activation_function": ACTIVATIONS_TO_HF[cfg.activation],
              "scale_embedding": cfg.scale_embedding, "tie_word_embeddings": True,
              "dropout": cfg.dropout, "attention_dropout": 0.0, "activation_dropout": 0.0,
              "is_encoder_decoder": True, "pad_token_id": cfg.pad_id, "eos_token_id": cfg.eos_id,
              "decoder_start_token_id": cfg.decoder_start_id, "forced_eos_token_id": cfg.eos_id,
              "bos_token_id": None, "dtype": "float32"}
    if model_type is MARIAN:   # Marian's own keys
        config.update(decoder_vocab_size=cfg.vocab_size, share_encoder_decoder_embeddings=True)
    return config


FAMILY = HFFamily("transformer", (MARIAN, BART, MBART), to_hf, NAMES,
                  from_tensors={"logits_bias": "final_logits_bias"},
                  hf_always={"logits_bias": True},
                  fixed_positions=("encoder.embed_positions.weight",
                                   "decoder.embed_positions.weight"))
