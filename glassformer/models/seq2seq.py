"""The encoder-decoder Transformer (Vaswani et al. 2017, "Attention Is All You Need"), composed of
the shared ops and blocks; HF MarianMT and BART load into it (io/hf_config.py, io/hf_names.py).

    src_ids (B, S) -> embed -> L_enc x block (bidirectional, padding masked) -> memory (B, S, C)
    tgt_in  (B, T) -> embed -> L_dec x block (causal self-attention,
                                              cross-attention over memory, MLP)
                   -> [norm_f] -> x @ tok_emb^T (or lm_head) [+ logits_bias] -> logits (B, T, V)

    embed(ids) = dropout([emb_norm](tok_emb[ids] * [sqrt(C)] + positions))   (seq2seq_embed.py)

Flags (Seq2SeqConfig), so one module covers the paper, Marian and BART:

    field             paper ("transformer")   MarianMT            BART
    norm_position     post                    post                post
    positions         sinusoidal              sinusoidal          learned, pos_offset = 2
    scale_embedding   True (x sqrt(C))        True                False
    emb_norm          False                   False               True (layernorm_embedding)
    activation        relu                    silu ("swish")      gelu
    logits_bias       False                   True                True (final_logits_bias)

Sinusoidal positions are laid out [sin | cos] (the first C/2 columns sin, the rest cos, as
tensor2tensor and Marian), a column permutation of the paper's interleaved table
(ops/position.py). A pre-norm config (norm_position="pre", as mBART) adds a final norm to each
stack (enc.norm_f, dec.norm_f).

The cross-attention fan-out: every decoder layer reads the same encoder output `memory`, so
d memory is the sum of the L_dec layers' contributions: one commented line in `backward`.
With shared embeddings tok_emb fans out three ways (encoder lookup, decoder lookup, output
head); its three gradients are summed on one line too.

Public API (the seq2seq objective builds on exactly this; decoding, which generate/beam.py
uses, is models/seq2seq_decode.py; the embedding is models/seq2seq_embed.py):

    forward(params, (src_ids, tgt_in_ids), cfg, *, src_mask=None, train=False, rng=None)
        -> (logits (B, T, V), ctx)      src_mask (B, S) bool, default src_ids != cfg.pad_id
    backward(dlogits (B, T, V), ctx) -> grads (same keys as params)

Matches HF `MarianMTModel` / `BartForConditionalGeneration` in eval mode (tests/io).
Deviations (training only): no dropout on attention weights or inside the MLP (BART's
attention_dropout / activation_dropout); the pad row of the embedding gets gradients.
Init: Normal(0, 0.02) matrices, zero biases, unit norm gains; token embeddings Normal(0, C^-1/2)
when scaled by sqrt(C) (fairseq's choice: unit-variance inputs), else Normal(0, 0.02).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, NamedTuple

import numpy as np

from glassformer.blocks.config import BlockConfig
from glassformer.blocks.names import prefixed, sub_params
from glassformer.blocks.norm import NormCtx, norm_backward, norm_forward, norm_shapes
from glassformer.blocks.residual import (BlockCtx, block_backward, block_forward, block_shapes,
                                         init_block)
from glassformer.errors import GlassformerError, check_choice
from glassformer.models.common import (LMHeadCtx, layers_backward, layers_forward, layers_shapes,
                                       lm_head_backward, lm_head_forward, split_layers)
from glassformer.models.family import (ENCODER_DECODER, Family, FamilyConfig,
                                       check_config_values, check_sizes)
from glassformer.models.seq2seq_embed import EmbedCtx, embed_backward, embed_forward, embed_shapes

ACTIVATIONS = ("relu", "gelu", "gelu_tanh", "silu")
POSITIONS = ("sinusoidal", "learned")
NOT_A_PAIR = ("the transformer (encoder-decoder) family takes x = (src_ids (B, S), tgt_in_ids "
              "(B, T)); to generate, use glassformer.translate")


@dataclass(frozen=True)
class Seq2SeqConfig(FamilyConfig):
    ARCH: ClassVar[str] = "transformer"
    vocab_size: int = 64            # V, one vocabulary for source and target
    max_seq_len: int = 64           # T_max, the longest source and the longest target
    n_layer: int = 3                # L encoder layers
    n_dec_layer: int | None = None  # decoder layers (None: n_layer)
    n_head: int = 4                 # H, in every attention block
    d_model: int = 128              # C
    d_ff: int | None = None         # F (None: 4 C)
    norm_eps: float = 1e-5          # LayerNorm eps
    norm_position: str = "post"     # "post" (paper, Marian, BART) or "pre" (adds norm_f per stack)
    activation: str = "relu"        # MLP: "relu" (paper), "gelu" (erf; BART), "gelu_tanh", "silu"
    positions: str = "sinusoidal"   # fixed [sin | cos] table, or "learned" (enc./dec.pos_emb)
    pos_offset: int = 0             # learned table rows before position 0 (BART: 2)
    scale_embedding: bool = True    # token embeddings times sqrt(C) (paper, Marian)
    emb_norm: bool = False          # LayerNorm after embeddings + positions (BART)
    share_embeddings: bool = True   # the encoder reads tok_emb (else its own enc.tok_emb)
    tie_embeddings: bool = True     # the output head is tok_emb^T (else lm_head (C, V))
    logits_bias: bool = False       # a (V,) bias added to the logits (final_logits_bias)
    dropout: float = 0.0            # on embeddings and sub-block outputs, training only
    pad_id: int = 0                 # source padding (masked); target padding is never a key
    eos_id: int = 1                 # ends a target
    decoder_start_id: int = 0       # the first decoder input (Marian: pad; BART: eos)
    n_dec_head: int | None = None   # decoder heads, self- and cross-attention (None: n_head)
    d_dec_ff: int | None = None     # decoder F (None: d_ff); distilled BARTs differ (issue 32)

    def __post_init__(self):
        check_config_values(self)  # types first: no inf, no 2.0 layers, no True heads
        check_sizes(self)
        if self.decoder_layers < 1:
            raise GlassformerError(f"n_dec_layer must be at least 1, got {self.n_dec_layer}")
        check_choice("activation", self.activation, ACTIVATIONS)
        check_choice("positions", self.positions, POSITIONS)
        if self.positions == "sinusoidal" and (self.pos_offset or self.d_model % 2):
            raise GlassformerError("sinusoidal positions need an even d_model and pos_offset 0")
        if self.pos_offset < 0:
            raise GlassformerError(f"pos_offset must be at least 0, got {self.pos_offset}")
        for field in ("pad_id", "eos_id", "decoder_start_id"):
            value = getattr(self, field)
            if not 0 <= value < self.vocab_size:
                raise GlassformerError(f"{field}={value} is outside [0, V={self.vocab_size})")
        self.block_config()  # validates n_head vs d_model, norm_position, dropout range
        self.block_config("dec")

    @property
    def decoder_layers(self) -> int:
        return self.n_layer if self.n_dec_layer is None else self.n_dec_layer

    def block_config(self, side: str = "enc") -> BlockConfig:
        """The blocks of one stack: "enc" (n_head, d_ff) or "dec" (n_dec_head, d_dec_ff, each
        defaulting to the encoder's); norms read only d_model and norm_eps, the same in both."""
        n_head = self.n_head if side == "enc" or self.n_dec_head is None else self.n_dec_head
        d_ff = self.d_ff if side == "enc" or self.d_dec_ff is None else self.d_dec_ff
        return BlockConfig(d_model=self.d_model, n_head=n_head, d_ff=d_ff,
                           norm="layer", norm_eps=self.norm_eps,
                           norm_position=self.norm_position, mlp=self.activation,
                           qkv_bias=True, out_bias=True, mlp_bias=True, position="none",
                           dropout=self.dropout)


class StackCtx(NamedTuple):
    """One stack (encoder or decoder): its embedding, layers and optional final norm."""
    embed: EmbedCtx
    blocks: list[BlockCtx]
    norm_f: NormCtx | None


class Seq2SeqCtx(NamedTuple):
    encoder: StackCtx
    decoder: StackCtx
    head: LMHeadCtx
    shared: bool                  # the encoder looked up tok_emb too
    logits_bias: bool             # logits_bias was added


# ---------------------------------------------------------------- params

def param_shapes(cfg: Seq2SeqConfig) -> dict[str, tuple[int, ...]]:
    """The name and shape of every param, in init_params' order."""
    bcfg, dec_bcfg = cfg.block_config(), cfg.block_config("dec")
    shapes = {"tok_emb": (cfg.vocab_size, cfg.d_model)}                          # (V, C)
    for side in ("enc", "dec"):
        shapes.update(embed_shapes(cfg, side))
        if side == "enc":
            shapes.update(prefixed(layers_shapes(bcfg, cfg.n_layer), "enc."))
        else:
            for i in range(cfg.decoder_layers):
                shapes.update(prefixed(block_shapes(dec_bcfg, cross=True), f"dec.blocks.{i}."))
        if cfg.norm_position == "pre":
            shapes.update(prefixed(norm_shapes(bcfg), f"{side}.norm_f."))
    if not cfg.tie_embeddings:
        shapes["lm_head"] = (cfg.d_model, cfg.vocab_size)                        # (C, V)
    if cfg.logits_bias:
        shapes["logits_bias"] = (cfg.vocab_size,)                                # (V,)
    return shapes


def init_params(cfg: Seq2SeqConfig, rng: np.random.Generator) -> dict:
    """Fresh float32 params in param_shapes' order (see the module docstring for the scheme)."""
    std = 0.02
    emb_std = cfg.d_model ** -0.5 if cfg.scale_embedding else std
    bcfg = cfg.block_config()
    params = {}
    for name, shape in param_shapes(cfg).items():
        if name.startswith(("enc.blocks.", "dec.blocks.")):
            continue  # drawn block by block below, in the same order
        if name.endswith(("tok_emb", "pos_emb")):
            params[name] = (rng.standard_normal(shape) * emb_std).astype(np.float32)
        elif name == "lm_head":
            params[name] = (rng.standard_normal(shape) * std).astype(np.float32)
        elif name.endswith(".w"):                                      # norm gains
            params[name] = np.ones(shape, np.float32)
        else:                                                          # norm shifts, logits_bias
            params[name] = np.zeros(shape, np.float32)
    # the blocks draw after the embeddings and heads; the dict is then put in param_shapes' order
    for i in range(cfg.n_layer):
        params.update(prefixed(init_block(bcfg, rng, std=std, out_std=std), f"enc.blocks.{i}."))
    for i in range(cfg.decoder_layers):
        params.update(prefixed(init_block(cfg.block_config("dec"), rng, std=std, out_std=std,
                                          cross=True), f"dec.blocks.{i}."))
    return {name: params[name] for name in param_shapes(cfg)}


# ---------------------------------------------------------------- the two stacks

def final_norm_forward(params: dict, x: np.ndarray, cfg: Seq2SeqConfig, side: str
                ) -> tuple[np.ndarray, NormCtx | None]:
    """A pre-norm stack ends with its own norm (norm_f); a post-norm one already did."""
    if cfg.norm_position == "post":
        return x, None
    return norm_forward(sub_params(params, f"{side}.norm_f."), x, cfg.block_config())


def _check_pair(x) -> tuple[np.ndarray, np.ndarray]:
    if not isinstance(x, (tuple, list)) or len(x) != 2:
        raise GlassformerError(NOT_A_PAIR)
    src_ids, tgt_ids = (np.asarray(part) for part in x)
    if src_ids.ndim == 2 and tgt_ids.ndim == 2 and src_ids.shape[0] != tgt_ids.shape[0]:
        raise GlassformerError(f"source ids {src_ids.shape} and target ids {tgt_ids.shape} "
                               "must have the same batch size B")
    return src_ids, tgt_ids


def source_mask(src_ids: np.ndarray, src_mask, cfg: Seq2SeqConfig) -> np.ndarray:
    """(B, S) bool, True for real source tokens: the given mask, else src_ids != pad_id."""
    if src_mask is None:
        return np.asarray(src_ids) != cfg.pad_id
    src_mask = np.asarray(src_mask).astype(bool)
    if src_mask.shape != np.shape(src_ids):
        raise GlassformerError(f"source mask has shape {src_mask.shape} but source ids have "
                               f"shape {np.shape(src_ids)}; they must match")
    return src_mask


def encoder_forward(params: dict, src_ids: np.ndarray, src_mask: np.ndarray,
                     cfg: Seq2SeqConfig, train: bool, rng) -> tuple[np.ndarray, StackCtx]:
    """src_ids (B, S) -> memory (B, S, C): bidirectional layers, padding keys masked."""
    x, embed_ctx = embed_forward(params, src_ids, cfg, "enc", 0, train, rng)
    x, block_ctxs = layers_forward(sub_params(params, "enc."), x, cfg.block_config(),
                                   cfg.n_layer, causal=False, key_mask=src_mask, train=train,
                                   rng=rng)
    x, norm_ctx = final_norm_forward(params, x, cfg, "enc")
    return x, StackCtx(embed_ctx, block_ctxs, norm_ctx)


def _decoder_layers(params: dict, x: np.ndarray, cfg: Seq2SeqConfig, memory: np.ndarray,
                    src_mask: np.ndarray, train: bool, rng) -> tuple[np.ndarray, list[BlockCtx]]:
    """The decoder's layers: causal self-attention, cross-attention over memory, MLP.
    (Decoding runs them through its KV cache instead: models/seq2seq_decode.py.)"""
    bcfg = cfg.block_config("dec")
    ctxs = []
    for layer in split_layers(sub_params(params, "dec."), cfg.decoder_layers):
        x, ctx = block_forward(layer, x, bcfg, causal=True, memory=memory, memory_mask=src_mask,
                               train=train, rng=rng)
        ctxs.append(ctx)
    return x, ctxs


def _decoder_layers_backward(dx: np.ndarray, ctxs: list[BlockCtx]
                             ) -> tuple[dict, np.ndarray, list[np.ndarray]]:
    """Back through the decoder's layers: (grads under "dec.blocks.{i}.", dx, the list of each
    layer's d memory, for the caller to sum)."""
    grads, dmemories = {}, []
    for i in reversed(range(len(ctxs))):
        block_grads, dx, dmemory = block_backward(dx, ctxs[i])
        grads.update(prefixed(block_grads, f"dec.blocks.{i}."))
        dmemories.append(dmemory)
    return grads, dx, dmemories


def logits_forward(params: dict, x: np.ndarray, cfg: Seq2SeqConfig
                  ) -> tuple[np.ndarray, LMHeadCtx]:
    """(B, T, C) -> logits (B, T, V): x @ tok_emb^T (tied) or x @ lm_head, + logits_bias."""
    logits, head_ctx = lm_head_forward(params, x)                      # (B, T, C) -> (B, T, V)
    if cfg.logits_bias:
        logits = logits + params["logits_bias"]                        # + (V,)
    return logits, head_ctx


# ---------------------------------------------------------------- forward and backward

def forward(params: dict, x, cfg: Seq2SeqConfig, *, src_mask: np.ndarray | None = None,
            train: bool = False, rng: np.random.Generator | None = None,
            kv_cache=None) -> tuple[np.ndarray, Seq2SeqCtx]:
    """x = (src_ids (B, S), tgt_in_ids (B, T)) -> logits (B, T, V) of each next target token.

    src_mask (B, S): True for real source tokens (default src_ids != cfg.pad_id). The target
    needs no mask: causal attention never lets a token see the padding after it.
    """
    if kv_cache is not None:
        raise GlassformerError(NOT_A_PAIR)
    src_ids, tgt_ids = _check_pair(x)
    src_mask = source_mask(src_ids, src_mask, cfg)
    memory, enc_ctx = encoder_forward(params, src_ids, src_mask, cfg, train, rng)
    h, embed_ctx = embed_forward(params, tgt_ids, cfg, "dec", 0, train, rng)
    h, block_ctxs = _decoder_layers(params, h, cfg, memory, src_mask, train, rng)
    h, norm_ctx = final_norm_forward(params, h, cfg, "dec")
    logits, head_ctx = logits_forward(params, h, cfg)
    dec_ctx = StackCtx(embed_ctx, block_ctxs, norm_ctx)
    return logits, Seq2SeqCtx(enc_ctx, dec_ctx, head_ctx, cfg.share_embeddings, cfg.logits_bias)


def backward(dlogits: np.ndarray, ctx: Seq2SeqCtx) -> dict:
    """dlogits (B, T, V) -> grads of every param: the decoder in reverse, then the encoder."""
    grads = {}
    if ctx.logits_bias:
        grads["logits_bias"] = dlogits.sum(axis=(0, 1))          # (B, T, V) -> (V,)
    head_grads, dh = lm_head_backward(dlogits, ctx.head)        # {"lm_head"} or {"tok_emb"}
    dec, enc = ctx.decoder, ctx.encoder
    if dec.norm_f is not None:
        norm_grads, dh = norm_backward(dh, dec.norm_f)
        grads.update(prefixed(norm_grads, "dec.norm_f."))
    block_grads, dh, dmemories = _decoder_layers_backward(dh, dec.blocks)
    grads.update(block_grads)
    emb_grads, d_tgt_table = embed_backward(dh, dec.embed, "dec")
    grads.update(emb_grads)
    # fan-out: every decoder layer's cross-attention read memory, so their gradients add up
    dmemory = np.sum(dmemories, axis=0)                     # L_dec x (B, S, C) -> (B, S, C)
    if enc.norm_f is not None:
        norm_grads, dmemory = norm_backward(dmemory, enc.norm_f)
        grads.update(prefixed(norm_grads, "enc.norm_f."))
    block_grads, dsrc = layers_backward(dmemory, enc.blocks)
    grads.update(prefixed(block_grads, "enc."))
    emb_grads, d_src_table = embed_backward(dsrc, enc.embed, "enc")
    grads.update(emb_grads)
    d_head = head_grads.pop("tok_emb", 0.0)       # the tied head's share (0 when untied)
    grads.update(head_grads)                      # lm_head, when untied
    d_src = d_src_table if ctx.shared else 0.0
    if not ctx.shared:
        grads["enc.tok_emb"] = d_src_table
    # fan-out: tok_emb fed the decoder lookup, the encoder lookup (shared) and the head (tied)
    grads["tok_emb"] = d_tgt_table + d_src + d_head
    return grads


# An encoder-decoder is not a causal LM: the generic generate loop does not apply (kv_layout
# None); glassformer.translate decodes it with models/seq2seq_decode.py.
FAMILY = Family(name="transformer", kind=ENCODER_DECODER, config=Seq2SeqConfig,
                init_params=init_params, forward=forward, backward=backward,
                param_shapes=param_shapes, kv_layout=None,
                sliding_context=False)
