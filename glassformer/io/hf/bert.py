"""BERT in Hugging Face form: model_type bert, BertModel or BertForMaskedLM files.

A BertForMaskedLM file nests the encoder under "bert." and holds the MLM head (cls.*); a bare
BertModel file has no prefix. Loading sees the head from the tensors (mlm_head), saving writes the
bare file without it. The MLM decoder is tok_emb^T plus cls.predictions.bias; files may repeat
both. The tokenizer is written as transformers' BertTokenizerFast reads it.
"""
from __future__ import annotations

from glassformer.errors import GlassformerError
from glassformer.io.hf.records import (TANH_GELUS, FamilyNames, HFFamily, ModelType, Rename,
                                       attention, linear, norm)
from glassformer.models.bert import BertConfig
from glassformer.tokenizers.char import CharTokenizer
from glassformer.tokenizers.char_wordpiece import char_as_wordpiece, write_bert_tokenizer_config
from glassformer.tokenizers.wordpiece import WordPieceTokenizer

_LAYER = "encoder.layer.{i}"
NAMES = FamilyNames(
    prefix="bert.",
    outside=("cls.",),
    top=(Rename("tok_emb", "embeddings.word_embeddings.weight", False),
         Rename("pos_emb", "embeddings.position_embeddings.weight", False),
         Rename("type_emb", "embeddings.token_type_embeddings.weight", False),
         *norm("emb_norm", "embeddings.LayerNorm"),
         *linear("mlm.w", "mlm.b", "cls.predictions.transform.dense"),
         *norm("mlm.norm", "cls.predictions.transform.LayerNorm"),
         Rename("mlm.bias", "cls.predictions.bias", False)),
    layer=(*attention(f"{_LAYER}.attention.self.query", f"{_LAYER}.attention.self.key",
                      f"{_LAYER}.attention.self.value", f"{_LAYER}.attention.output.dense"),
           *norm("norm1", f"{_LAYER}.attention.output.LayerNorm"),
           *linear("mlp.w_up", "mlp.b_up", f"{_LAYER}.intermediate.dense"),
           *linear("mlp.w_down", "mlp.b_down", f"{_LAYER}.output.dense"),
           *norm("norm2", f"{_LAYER}.output.LayerNorm")),
    # The MLM decoder is tok_emb^T plus cls.predictions.bias; files may repeat both.
    tied={"cls.predictions.decoder.weight": "embeddings.word_embeddings.weight",
          "cls.predictions.decoder.bias": "cls.predictions.bias"},
    ignored=(r"embeddings\.(position_ids|token_type_ids)",   # index buffers
             r"pooler\.dense\.(weight|bias)",                # [CLS] pooler: unused by mean pooling
             r"cls\.seq_relationship\.(weight|bias)"))        # next-sentence head

READS = frozenset({
    "vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
    "intermediate_size", "max_position_embeddings", "type_vocab_size", "layer_norm_eps",
    "hidden_dropout_prob", "tie_word_embeddings",
    "attention_probs_dropout_prob",  # glassformer has no attention-weight dropout
    "classifier_dropout",            # classification heads are not loaded
    "directionality", "pooler_fc_size", "pooler_num_attention_heads",
    "pooler_num_fc_layers", "pooler_size_per_head", "pooler_type"})  # pooler, unused


def from_hf(hf: dict, *, mlm_head: bool = False) -> BertConfig:
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


BERT = ModelType(
    "bert", "bert", "BertModel", READS,   # with the MLM head: BertForMaskedLM
    required={"hidden_act": ("gelu", "gelu_new", "gelu_pytorch_tanh"),
              "position_embedding_type": ("absolute",)},
    from_hf=from_hf)


def to_hf(cfg: BertConfig) -> dict:
    """The config.json of the matching HF BertModel (or BertForMaskedLM with mlm_head)."""
    return {"architectures": ["BertForMaskedLM" if cfg.mlm_head else BERT.hf_class],
            "model_type": BERT.name, "vocab_size": cfg.vocab_size,
            "hidden_size": cfg.d_model, "num_hidden_layers": cfg.n_layer,
            "num_attention_heads": cfg.n_head,
            "intermediate_size": cfg.block_config().hidden,
            "hidden_act": "gelu" if cfg.activation == "gelu" else "gelu_new",
            "max_position_embeddings": cfg.max_seq_len, "type_vocab_size": cfg.n_types,
            "layer_norm_eps": cfg.norm_eps, "hidden_dropout_prob": cfg.dropout,
            "attention_probs_dropout_prob": 0.0, "position_embedding_type": "absolute",
            "tie_word_embeddings": True, "dtype": "float32"}


def save_tokenizer(tokenizer, folder, cfg: BertConfig) -> None:
    """A BERT's tokenizer as transformers' BertTokenizerFast reads it: vocab.txt,
    tokenizer.json, tokenizer_config.json (a char vocabulary through
    tokenizers/char_wordpiece.py, with the same ids)."""
    if isinstance(tokenizer, CharTokenizer):
        tokenizer = char_as_wordpiece(tokenizer)   # the same ids (tokenizers/char_wordpiece.py)
    if not isinstance(tokenizer, WordPieceTokenizer):
        raise GlassformerError(f"a BERT's tokenizer is exported as BERT WordPiece files; this "
                               f"one is a {type(tokenizer).__name__}")
    tokenizer.save(folder)
    write_bert_tokenizer_config(folder, tokenizer, cfg.max_seq_len)


FAMILY = HFFamily("bert", (BERT,), to_hf, NAMES, bare_unless="mlm_head",
                  from_tensors={"mlm_head": "cls.predictions."}, save_tokenizer=save_tokenizer)
