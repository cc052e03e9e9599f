"""BERT (Devlin et al. 2019), the encoder: composed of the shared ops and blocks.

    ids (B, T), token types (B, T)
       -> tok_emb[ids] + pos_emb[positions] + type_emb[types] -> LayerNorm -> dropout   (B, T, C)
       -> L x post-norm block: h = Norm1(x + Attn(x)), out = Norm2(h + MLP(h))
          (bidirectional attention; padding keys masked by the attention mask)
       -> last hidden state (B, T, C)                                  `encoder_forward`
       -> with cfg.mlm_head: dense -> GELU -> LayerNorm -> @ tok_emb^T + bias
          -> masked-LM logits (B, T, V)                                 `mlm_forward`

Two pairs, and the family's pair that composes them:
  * `encoder_forward`/`encoder_backward`: ids -> last hidden state, the encoder alone;
  * `mlm_forward`/`mlm_backward`: the masked-LM head (HF `BertForMaskedLM`'s cls.predictions),
    its decoder tied to the word embeddings;
  * `forward`/`backward` (what `Model`, training and FAMILY call): the encoder, then the MLM head
    when cfg.mlm_head. So a BertForMaskedLM (or a run trained with --objective mlm) gives logits
    (B, T, V) and a BertModel (MiniLM) gives hidden states (B, T, C), as in transformers.
Sentence embeddings (sentence-transformers) read the encoder alone: `mean_pool` over real
tokens, `l2_normalize`.

Matches HF `BertModel` (exact erf GELU, LayerNorm eps 1e-12, post-norm) and `BertForMaskedLM`'s
`cls.predictions` head. The [CLS] pooler and next-sentence head are not implemented.
Deviations (training only; inference is unaffected): no dropout on attention weights (BERT's
attention_probs_dropout_prob), and the [PAD] row of tok_emb gets lookup gradients like any other
(HF's nn.Embedding(padding_idx=pad_token_id) gives it none).
Init: Normal(0, 0.02) for matrices, zero biases, unit norm gains (BERT's own). A recipe may
rewrite a fresh init (the Tang BERT's neighbour heads: train/recipes/neighbour_heads.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, NamedTuple

import numpy as np

from glassformer.blocks.config import BlockConfig
from glassformer.blocks.names import prefixed, sub_params
from glassformer.blocks.norm import NormCtx, init_norm, norm_backward, norm_forward, norm_shapes
from glassformer.blocks.residual import BlockCtx
from glassformer.errors import GlassformerError
from glassformer.models.common import (check_ids_and_positions, init_layers, layers_backward,
                                       layers_forward, layers_shapes)
from glassformer.models.family import (ENCODER, Family, FamilyConfig, check_config_values,
                                       check_sizes, config_from_dict)
from glassformer.ops.activation import GeluCtx, gelu_backward, gelu_forward
from glassformer.ops.dropout import DropoutCtx, dropout_backward, dropout_forward
from glassformer.ops.embedding import EmbeddingCtx, embedding_backward, embedding_forward
from glassformer.ops.layer_norm import LayerNormCtx, layer_norm_backward, layer_norm_forward
from glassformer.ops.linear import LinearCtx, linear_backward, linear_forward

POOL_EPS = 1e-9      # sentence-transformers clamps the token count to at least this
NORMALIZE_EPS = 1e-12  # torch.nn.functional.normalize's default eps
RECIPE_FLAGS = ("sinusoid_init", "neighbour_heads")   # old config.json keys, ignored on load
ENCODER_NO_CACHE = ("BERT is an encoder: it reads the whole sequence at once, keeps no KV cache "
                    "and cannot generate")


@dataclass(frozen=True)
class BertConfig(FamilyConfig):
    ARCH: ClassVar[str] = "bert"
    vocab_size: int = 65            # V
    max_seq_len: int = 64           # T_max, rows of the learned position table
    n_types: int = 2                # token types ("segments": sentence A / B)
    n_layer: int = 4                # L
    n_head: int = 4                 # H
    d_model: int = 128              # C
    d_ff: int | None = None         # F (None: 4 C)
    norm_eps: float = 1e-12         # LayerNorm eps (BERT's value)
    dropout: float = 0.0            # on embeddings and sub-block outputs, training only
    activation: str = "gelu"        # exact erf GELU; "gelu_tanh" for checkpoints using gelu_new
    mlm_head: bool = False          # params include the masked-LM head (mlm.*)

    def __post_init__(self):
        check_config_values(self)  # types first: no inf, no 2.0 layers, no True heads
        check_sizes(self, ("vocab_size", "max_seq_len", "n_types", "n_layer", "n_head",
                           "d_model"))
        if self.activation not in ("gelu", "gelu_tanh"):
            raise GlassformerError(f"BERT activation must be 'gelu' or 'gelu_tanh', "
                                   f"got {self.activation!r}")
        self.block_config()  # validates n_head vs d_model and the dropout range

    def block_config(self) -> BlockConfig:
        return BlockConfig(d_model=self.d_model, n_head=self.n_head, d_ff=self.d_ff,
                           norm="layer", norm_eps=self.norm_eps, norm_position="post",
                           mlp=self.activation, qkv_bias=True, out_bias=True, mlp_bias=True,
                           position="none", dropout=self.dropout)

    @classmethod
    def from_dict(cls, data: dict) -> "BertConfig":
        # note: runs saved before the Tang BERT recipe owned its init have RECIPE_FLAGS in
        # config.json; they only chose that init, so a loaded model ignores them
        # (train/recipes/neighbour_heads.py reads neighbour_heads once, on resume)
        return config_from_dict(cls, {key: value for key, value in data.items()
                                      if key not in RECIPE_FLAGS})


class MLMCtx(NamedTuple):
    dense: LinearCtx        # saves the last hidden state (B, T, C), the head's input
    act: GeluCtx
    norm: LayerNormCtx
    decoder: LinearCtx      # x @ tok_emb^T: saves the normed (B, T, C) and tok_emb^T (C, V)


class BertCtx(NamedTuple):
    tok: EmbeddingCtx
    pos: EmbeddingCtx
    types: EmbeddingCtx
    emb_norm: NormCtx
    drop: DropoutCtx
    blocks: list[BlockCtx]
    mlm: MLMCtx | None = None   # the masked-LM head's, when `forward` ran it (cfg.mlm_head)
    head_rows: tuple | None = None   # the positions the head ran on (None: all of them)


def param_shapes(cfg: BertConfig) -> dict[str, tuple[int, ...]]:
    """The name and shape of every param, in init_params' order (mlm.* with cfg.mlm_head)."""
    c = cfg.d_model
    bcfg = cfg.block_config()
    shapes = {"tok_emb": (cfg.vocab_size, c),                                 # (V, C)
              "pos_emb": (cfg.max_seq_len, c),                                # (T_max, C)
              "type_emb": (cfg.n_types, c)}                                   # (types, C)
    shapes.update(prefixed(norm_shapes(bcfg), "emb_norm."))
    shapes.update(layers_shapes(bcfg, cfg.n_layer))
    if cfg.mlm_head:
        shapes.update({"mlm.w": (c, c), "mlm.b": (c,)})                         # (C, C)
        shapes.update(prefixed(norm_shapes(bcfg), "mlm.norm."))
        shapes["mlm.bias"] = (cfg.vocab_size,)                                  # (V,)
    return shapes


def init_params(cfg: BertConfig, rng: np.random.Generator) -> dict:
    """Fresh float32 params: Normal(0, 0.02) matrices and tables, zero biases, unit gains."""
    std = 0.02
    bcfg = cfg.block_config()
    shapes = param_shapes(cfg)
    params = {}
    for name in ("tok_emb", "pos_emb", "type_emb"):                          # drawn in this order
        params[name] = (rng.standard_normal(shapes[name]) * std).astype(np.float32)
    params.update(prefixed(init_norm(bcfg), "emb_norm."))
    params.update(init_layers(bcfg, cfg.n_layer, rng, std=std, out_std=std))
    if cfg.mlm_head:
        params["mlm.w"] = (rng.standard_normal(shapes["mlm.w"]) * std).astype(np.float32)
        params["mlm.b"] = np.zeros(shapes["mlm.b"], np.float32)
        params.update(prefixed(init_norm(bcfg), "mlm.norm."))
        params["mlm.bias"] = np.zeros(shapes["mlm.bias"], np.float32)
    return params


def forward(params: dict, ids: np.ndarray, cfg: BertConfig, *,
            token_type_ids: np.ndarray | None = None, key_mask: np.ndarray | None = None,
            train: bool = False, rng: np.random.Generator | None = None,
            positions: np.ndarray | None = None, kv_cache=None,
            head_rows: tuple[np.ndarray, np.ndarray] | None = None,
            hooks: dict | None = None) -> tuple[np.ndarray, BertCtx]:
    """ids (B, T) -> masked-LM logits (B, T, V) with cfg.mlm_head, else last hidden state (B, T, C).

    head_rows: (rows, columns) of the N positions the MLM head runs on, as np.nonzero gives them;
    the logits are then (N, V), those positions' rows of the full logits (a masked-LM loss counts
    only them: train/objectives/mlm.py). The other options are `encoder_forward`'s; ctx.mlm holds
    the head's ctx when it ran.
    """
    hidden, ctx = encoder_forward(params, ids, cfg, token_type_ids=token_type_ids,
                                  key_mask=key_mask, train=train, rng=rng, positions=positions,
                                  kv_cache=kv_cache, hooks=hooks)
    if not cfg.mlm_head:
        return hidden, ctx
    chosen = hidden if head_rows is None else hidden[head_rows]       # (B, T, C) or (N, C)
    logits, mlm_ctx = mlm_forward(params, chosen, cfg)                # (..., C) -> (..., V)
    return logits, ctx._replace(mlm=mlm_ctx, head_rows=head_rows)


def backward(dout: np.ndarray, ctx: BertCtx) -> dict:
    """dout: dlogits (B, T, V) or (N, V) when forward ran the MLM head, else dhidden (B, T, C)
    -> grads."""
    if ctx.mlm is None:
        return encoder_backward(dout, ctx)
    grads, dchosen = mlm_backward(dout, ctx.mlm)
    dhidden = dchosen
    if ctx.head_rows is not None:
        # the positions the head skipped get no gradient; each chosen one appears once, so a
        # plain scatter (no add.at)
        dhidden = np.zeros(ctx.tok.ids.shape + dchosen.shape[-1:], dtype=dchosen.dtype)
        dhidden[ctx.head_rows] = dchosen                              # (N, C) -> (B, T, C)
    tok_decoder = grads.pop("tok_emb")
    grads.update(encoder_backward(dhidden, ctx))
    grads["tok_emb"] = grads["tok_emb"] + tok_decoder   # fan-out: tok_emb is lookup and decoder
    return grads


def encoder_forward(params: dict, ids: np.ndarray, cfg: BertConfig, *,
                    token_type_ids: np.ndarray | None = None,
                    key_mask: np.ndarray | None = None, train: bool = False,
                    rng: np.random.Generator | None = None, positions: np.ndarray | None = None,
                    kv_cache=None, hooks: dict | None = None) -> tuple[np.ndarray, BertCtx]:
    """ids (B, T) -> last hidden state (B, T, C), the encoder alone (no head).

    token_type_ids (B, T): segment of each token (default all 0). key_mask (B, T): True (or 1)
    for real tokens, False on padding, as HF's attention_mask. positions: default arange(T).
    hooks: functions at every layer's hook points, which may replace values (blocks/hooks.py).
    """
    if kv_cache is not None:
        raise GlassformerError(ENCODER_NO_CACHE)
    positions = check_ids_and_positions(ids, positions, 0, cfg.max_seq_len)
    types = np.zeros_like(ids) if token_type_ids is None else np.asarray(token_type_ids)
    if types.shape != ids.shape:
        raise GlassformerError(f"token_type_ids has shape {types.shape} but ids have shape "
                               f"{ids.shape}; they must match")
    if key_mask is not None:
        key_mask = np.asarray(key_mask).astype(bool)
        if key_mask.shape != ids.shape:
            raise GlassformerError(f"attention mask has shape {key_mask.shape} but ids have "
                                   f"shape {ids.shape}; they must match")
    bcfg = cfg.block_config()
    tok, tok_ctx = embedding_forward(ids, params["tok_emb"])          # (B, T) -> (B, T, C)
    pos, pos_ctx = embedding_forward(positions, params["pos_emb"])    # (T,) -> (T, C)
    typ, type_ctx = embedding_forward(types, params["type_emb"])      # (B, T) -> (B, T, C)
    x, emb_norm_ctx = norm_forward(sub_params(params, "emb_norm."), tok + pos + typ, bcfg)
    x, drop_ctx = dropout_forward(x, p=cfg.dropout, rng=rng, train=train)
    x, block_ctxs = layers_forward(params, x, bcfg, cfg.n_layer, causal=False, key_mask=key_mask,
                                   positions=positions, train=train, rng=rng, hooks=hooks)
    return x, BertCtx(tok_ctx, pos_ctx, type_ctx, emb_norm_ctx, drop_ctx, block_ctxs)


def encoder_backward(dhidden: np.ndarray, ctx: BertCtx) -> dict:
    """dhidden (B, T, C) -> grads of the encoder's params (mlm.* come from `mlm_backward`)."""
    grads, dx = layers_backward(dhidden, ctx.blocks)
    dx = dropout_backward(dx, ctx.drop)
    norm_grads, dsum = norm_backward(dx, ctx.emb_norm)
    grads.update(prefixed(norm_grads, "emb_norm."))
    # The three lookups were summed, so each receives the same gradient dsum.
    grads["tok_emb"] = embedding_backward(dsum, ctx.tok)
    grads["type_emb"] = embedding_backward(dsum, ctx.types)
    # One position row served every batch item when positions are (T,): sum over B first.
    dpos = dsum.sum(axis=0) if ctx.pos.ids.ndim == 1 else dsum     # (B, T, C) -> (T, C)
    grads["pos_emb"] = embedding_backward(dpos, ctx.pos)
    return grads


def mlm_forward(params: dict, hidden: np.ndarray, cfg: BertConfig
                ) -> tuple[np.ndarray, MLMCtx]:
    """Masked-LM logits: hidden (..., C) -> (..., V), the decoder tied to tok_emb.

    Any leading shape: (B, T, C) for every position, or (N, C) for only the N positions a masked-LM
    loss counts (train/objectives/mlm.py), which gives those rows the same logits.
    """
    if not cfg.mlm_head:
        raise GlassformerError("this BERT has no masked-LM head (its checkpoint had no "
                               "cls.predictions.* tensors)")
    h, dense_ctx = linear_forward(hidden, params["mlm.w"], params["mlm.b"])     # (..., C)
    h, act_ctx = gelu_forward(h, approximate="tanh" if cfg.activation == "gelu_tanh" else "none")
    h, norm_ctx = layer_norm_forward(h, params["mlm.norm.w"], params["mlm.norm.b"],
                                     eps=cfg.norm_eps)
    logits, decoder_ctx = linear_forward(h, params["tok_emb"].T,
                                         params["mlm.bias"])               # (..., C) -> (..., V)
    return logits, MLMCtx(dense_ctx, act_ctx, norm_ctx, decoder_ctx)


def mlm_backward(dlogits: np.ndarray, ctx: MLMCtx) -> tuple[dict, np.ndarray]:
    """Returns (grads of mlm.* and the decoder's share of tok_emb, dhidden (..., C)).

    note: tok_emb also fed the encoder's input lookup; the caller adds the two tok_emb grads.
    """
    grads = {}
    dh, dw_dec, grads["mlm.bias"] = linear_backward(dlogits, ctx.decoder)      # dw_dec (C, V)
    grads["tok_emb"] = dw_dec.T                                                # (C, V) -> (V, C)
    dh, grads["mlm.norm.w"], grads["mlm.norm.b"] = layer_norm_backward(dh, ctx.norm)
    dh = gelu_backward(dh, ctx.act)
    dhidden, grads["mlm.w"], grads["mlm.b"] = linear_backward(dh, ctx.dense)
    return grads, dhidden


def mean_pool(hidden: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
    """Mean of the real tokens' vectors: hidden (B, T, C), mask (B, T) -> (B, C).

    As sentence-transformers: sum(hidden * mask) / max(count, 1e-9) per row.
    """
    if mask is None:
        return hidden.mean(axis=1)
    weights = np.asarray(mask).astype(hidden.dtype)[:, :, None]      # (B, T) -> (B, T, 1)
    total = (hidden * weights).sum(axis=1)                           # (B, T, C) -> (B, C)
    count = np.maximum(weights.sum(axis=1), POOL_EPS)                # (B, 1)
    return total / count


def l2_normalize(x: np.ndarray) -> np.ndarray:
    """x / max(||x||, 1e-12) along the last axis, as torch.nn.functional.normalize."""
    norm = np.sqrt((x * x).sum(axis=-1, keepdims=True))              # (..., C) -> (..., 1)
    return x / np.maximum(norm, NORMALIZE_EPS)


# An encoder reads whole sequences: no generation, so no KV cache and no sliding window.
FAMILY = Family(name="bert", kind=ENCODER, config=BertConfig,
                init_params=init_params, forward=forward, backward=backward,
                param_shapes=param_shapes, kv_layout=None,
                sliding_context=False)
