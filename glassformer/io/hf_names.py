"""Hugging Face state dicts <-> glassformer params: one rename table per family.

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
config.json's keys are io/hf_config.py's.
"""
from __future__ import annotations

import re
from typing import NamedTuple

import numpy as np

from glassformer.errors import CheckpointError, GlassformerError
from glassformer.models.registry import family


class Rename(NamedTuple):
    ours: str            # glassformer name, "{i}" for the layer index
    theirs: str          # HF key without the base-model prefix, same "{i}"
    transpose: bool      # nn.Linear (out, in) <-> glassformer (in, out)


class Split(NamedTuple):
    ours: tuple[str, ...]  # glassformer names of the equal parts, in order
    theirs: str            # one HF tensor holding the parts side by side on its last axis


class Squeeze(NamedTuple):
    ours: str            # glassformer name of a (N,) vector
    theirs: str          # HF key of the same values as a (1, N) row (BART's final_logits_bias)


class FamilyNames(NamedTuple):
    prefix: str               # the base model's key prefix in task-model files
    outside: tuple            # key starts of task heads, which never carry the prefix
    top: tuple                # Rename rows outside the layers
    layer: tuple              # Rename / Split rows of layer {i}
    tied: dict                # HF key -> HF key it must equal when the head is tied
    ignored: tuple            # regexes of HF keys that are skipped on load
    layer_ours: str = "blocks.{i}."       # our prefix of the `layer` rows
    dec_layer: tuple = ()                 # an encoder-decoder's decoder layer rows
    dec_layer_ours: str = "dec.blocks.{i}."


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


def _seq2seq_attention(ours: str, theirs: str) -> tuple:
    """The q, k, v, out projections of one attention block, weights and biases (nn.Linear)."""
    rows = []
    for mine, hf in (("q", "q_proj"), ("k", "k_proj"), ("v", "v_proj"), ("o", "out_proj")):
        rows.append(Rename(f"{ours}.w{mine}", f"{theirs}.{hf}.weight", True))
        rows.append(Rename(f"{ours}.b{mine}", f"{theirs}.{hf}.bias", False))
    return tuple(rows)


def _seq2seq_norm(ours: str, theirs: str) -> tuple:
    return (Rename(f"{ours}.w", f"{theirs}.weight", False),
            Rename(f"{ours}.b", f"{theirs}.bias", False))


def _seq2seq_layer(side: str, cross: bool) -> tuple:
    """One Marian/BART layer: self_attn (+ encoder_attn), fc1/fc2 and their post-norms."""
    layer = f"{side}.layers.{{i}}"
    rows = (_seq2seq_attention("attn", f"{layer}.self_attn")
            + _seq2seq_norm("norm1", f"{layer}.self_attn_layer_norm"))
    if cross:
        rows += (_seq2seq_attention("cross", f"{layer}.encoder_attn")
                 + _seq2seq_norm("norm_cross", f"{layer}.encoder_attn_layer_norm"))
    return rows + (Rename("mlp.w_up", f"{layer}.fc1.weight", True),
                   Rename("mlp.b_up", f"{layer}.fc1.bias", False),
                   Rename("mlp.w_down", f"{layer}.fc2.weight", True),
                   Rename("mlp.b_down", f"{layer}.fc2.bias", False),
                   *_seq2seq_norm("norm2", f"{layer}.final_layer_norm"))


# Marian (MarianMTModel) and BART (BartForConditionalGeneration) share one naming; a row whose
# param the config lacks (BART's positions in a Marian model) is skipped.
SEQ2SEQ = FamilyNames(
    prefix="model.",
    outside=("lm_head.", "final_logits_bias"),
    top=(Rename("tok_emb", "shared.weight", False),
         Rename("enc.tok_emb", "encoder.embed_tokens.weight", False),
         Rename("enc.pos_emb", "encoder.embed_positions.weight", False),
         *_seq2seq_norm("enc.emb_norm", "encoder.layernorm_embedding"),
         *_seq2seq_norm("enc.norm_f", "encoder.layer_norm"),
         Rename("dec.pos_emb", "decoder.embed_positions.weight", False),
         *_seq2seq_norm("dec.emb_norm", "decoder.layernorm_embedding"),
         *_seq2seq_norm("dec.norm_f", "decoder.layer_norm"),
         Rename("lm_head", "lm_head.weight", True),
         Squeeze("logits_bias", "final_logits_bias")),
    layer=_seq2seq_layer("encoder", cross=False),
    tied={"encoder.embed_tokens.weight": "shared.weight",
          "decoder.embed_tokens.weight": "shared.weight", "lm_head.weight": "shared.weight"},
    ignored=(),
    layer_ours="enc.blocks.{i}.",
    dec_layer=_seq2seq_layer("decoder", cross=True))

NAMES = {"gpt2": GPT2, "llama": LLAMA, "bert": BERT, "transformer": SEQ2SEQ}


def family_names(arch: str) -> FamilyNames:
    if arch not in NAMES:
        raise GlassformerError(f"no Hugging Face name table for arch {arch!r}; known: "
                               f"{sorted(NAMES)}")
    return NAMES[arch]


# ---------------------------------------------------------------- shapes and renaming

def _rows(names: FamilyNames, n_layer: int, n_dec_layer: int = 0) -> list:
    """Every table row with "{i}" filled in, layer rows prefixed with "blocks.{i}." (an
    encoder-decoder's: "enc.blocks.{i}." and, for its n_dec_layer layers, "dec.blocks.{i}.")."""
    rows = list(names.top)
    stacks = ((names.layer, names.layer_ours, n_layer),
              (names.dec_layer, names.dec_layer_ours, n_dec_layer))
    for table, ours, count in stacks:
        for i in range(count):
            mine = ours.format(i=i)
            for row in table:
                if isinstance(row, Split):
                    rows.append(Split(tuple(mine + o for o in row.ours), row.theirs.format(i=i)))
                else:
                    rows.append(Rename(mine + row.ours, row.theirs.format(i=i), row.transpose))
    return rows


def _rows_of(arch: str, cfg) -> list:
    """_rows for this config (decoder layers counted for an encoder-decoder)."""
    return _rows(family_names(arch), cfg.n_layer, getattr(cfg, "decoder_layers", 0))


def hf_shapes(arch: str, cfg) -> dict[str, tuple[int, ...]]:
    """The HF keys (without prefix) and shapes a checkpoint of this config must hold."""
    ours = family(arch).param_shapes(cfg)
    shapes = {}
    for row in _rows_of(arch, cfg):
        if isinstance(row, Split):
            if row.ours[0] in ours:
                parts = [ours[name] for name in row.ours]
                shapes[row.theirs] = parts[0][:-1] + (sum(p[-1] for p in parts),)
        elif isinstance(row, Squeeze):
            if row.ours in ours:
                shapes[row.theirs] = (1,) + ours[row.ours]                   # (N,) -> (1, N)
        elif row.ours in ours:
            shape = ours[row.ours]
            shapes[row.theirs] = shape[::-1] if row.transpose else shape
    return shapes


def to_glassformer(arch: str, cfg, tensors: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """HF tensors (keys without prefix, already checked by shape) -> glassformer params.

    Every array is contiguous float32 in glassformer's (in, out) layout: transposed weights stay a
    column-major view of the file's (out, in) rows, others are row-major; a copy only when split
    or widened, else the tensor itself (as read from the file).
    """
    params = {}
    for row in _rows_of(arch, cfg):
        if row.theirs not in tensors:
            continue
        tensor = tensors[row.theirs]
        if isinstance(row, Squeeze):
            params[row.ours] = np.ascontiguousarray(tensor.reshape(-1), dtype=np.float32)
        elif isinstance(row, Split):
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
    for row in _rows_of(arch, cfg):
        if isinstance(row, Split):
            if row.ours[0] not in params:
                continue
            array = np.concatenate([params[name] for name in row.ours], axis=-1)  # -> (C, 3C)
        elif isinstance(row, Squeeze):
            if row.ours not in params:
                continue
            array = params[row.ours][None]                                 # (N,) -> (1, N)
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
    ignored = re.compile("|".join(names.ignored) or "(?!)")  # "(?!)": an empty list skips none
    table = {}
    for key in keys:
        name = key[len(names.prefix):] if key.startswith(names.prefix) else key
        if ignored.fullmatch(name):
            continue
        if name in table:
            raise CheckpointError(f"tensor {name!r} appears twice, as {table[name]!r} and {key!r}")
        table[name] = key
    return table
