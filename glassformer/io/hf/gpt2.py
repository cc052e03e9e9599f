"""GPT-2 in Hugging Face form: model_type gpt2, GPT2LMHeadModel / GPT2Model files.

GPT-2's Conv1D stores W as (in, out), glassformer's layout already: no transpose. Its fused
c_attn (C, 3C) holds [W_q | W_k | W_v] side by side: split into wq, wk, wv. HF's GPT-2 always has
biases, so a bias-free model is saved with zero biases (the same model).
"""
from __future__ import annotations

from glassformer.errors import GlassformerError
from glassformer.io.hf.records import (LM_HEAD, TANH_GELUS, FamilyNames, HFFamily, ModelType,
                                       Rename, Split, linear, norm)
from glassformer.models.gpt2 import GPT2Config

NAMES = FamilyNames(
    prefix="transformer.",
    outside=("lm_head.",),
    top=(Rename("tok_emb", "wte.weight", False),
         Rename("pos_emb", "wpe.weight", False),
         *norm("norm_f", "ln_f"),
         LM_HEAD),
    layer=(*norm("norm1", "h.{i}.ln_1"),
           Split(("attn.wq", "attn.wk", "attn.wv"), "h.{i}.attn.c_attn.weight"),
           Split(("attn.bq", "attn.bk", "attn.bv"), "h.{i}.attn.c_attn.bias"),
           *linear("attn.wo", "attn.bo", "h.{i}.attn.c_proj", transpose=False),
           *norm("norm2", "h.{i}.ln_2"),
           *linear("mlp.w_up", "mlp.b_up", "h.{i}.mlp.c_fc", transpose=False),
           *linear("mlp.w_down", "mlp.b_down", "h.{i}.mlp.c_proj", transpose=False)),
    tied={"lm_head.weight": "wte.weight"},
    ignored=(r"h\.\d+\.attn\.(bias|masked_bias)",))   # causal-mask buffers of old checkpoints

READS = frozenset({
    "vocab_size", "n_positions", "n_ctx", "n_embd", "n_layer", "n_head", "n_inner",
    "layer_norm_epsilon", "resid_pdrop", "embd_pdrop", "tie_word_embeddings",
    "attn_pdrop",               # glassformer has no attention-weight dropout (training)
    "reorder_and_upcast_attn",  # float precision of torch's matmul only
    "summary_type", "summary_use_proj", "summary_activation", "summary_proj_to_labels",
    "summary_first_dropout"})   # GPT2DoubleHeadsModel's classifier, not loaded


def from_hf(hf: dict) -> GPT2Config:
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


GPT2 = ModelType(
    "gpt2", "gpt2", "GPT2LMHeadModel", READS,
    required={"scale_attn_weights": (True,), "scale_attn_by_inverse_layer_idx": (False,),
              "activation_function": (*TANH_GELUS, "gelu", "relu")},
    from_hf=from_hf)


def to_hf(cfg: GPT2Config) -> dict:
    """GPT2Config -> the config.json of an HF GPT2LMHeadModel (biases are written as zeros when
    the config has none, which is the same model)."""
    return {"architectures": [GPT2.hf_class], "model_type": GPT2.name,
            "vocab_size": cfg.vocab_size, "n_positions": cfg.max_seq_len, "n_embd": cfg.d_model,
            "n_layer": cfg.n_layer, "n_head": cfg.n_head, "n_inner": cfg.d_ff,
            "activation_function": "gelu_new" if cfg.activation == "gelu_tanh" else cfg.activation,
            "resid_pdrop": cfg.dropout, "embd_pdrop": cfg.dropout, "attn_pdrop": 0.0,
            "layer_norm_epsilon": cfg.norm_eps, "tie_word_embeddings": cfg.tie_embeddings,
            "scale_attn_weights": True, "bos_token_id": None, "eos_token_id": None,
            "dtype": "float32"}


FAMILY = HFFamily("gpt2", (GPT2,), to_hf, NAMES, hf_always={"bias": True}, conv1d=True)
