"""`inspect(model, text_or_ids) -> Inspection`: what a model computed, read from its own forward.

One forward pass in eval mode, then everything is read from the ctx that backward would use
(no second, instrumented model, no hooks):

    attentions[l]     attention_weights(ctx.blocks[l])                (B, H, T, S)
                      exactly the float32 weights the forward multiplied V by; query head
                      h = kv * G + g, as HF's repeat_kv orders them (see blocks/attention.py)
    residual[l]       the residual stream entering layer l, and leaving the last one:
                        pre-norm (GPT-2, LLaMA): x_0 = the embeddings; x_{l+1} = x_l + a_l + m_l
                        (residual_after: a_l and m_l are the sub-blocks' outputs, recomputed
                        with linear_forward from the inputs their ctx saved, the same product,
                        the same numbers: LayerNorm's ctx keeps x-hat but not the mean, so x
                        itself is rebuilt rather than read)
                        post-norm (BERT): x_l is layer l's attention input (layer_input)
(attention_weights, residual_after and layer_input are blocks/residual.py's readers of a layer's
ctx.)
    hidden_states     as transformers' output_hidden_states: L + 1 arrays (B, T, C), the last
                      one after the final norm for decoders (the LM head's saved input)

Long texts (issue 32): `inspect(..., layers=[...])` on a causal LM keeps only those layers'
ctxs (the forward hands each layer to `on_layer` and forgets it: models/common.py), holds the
residual stream as it passes, and asks the LM head for the last position only; the logit lens
then runs CHUNK_T positions at a time, for the chosen layers only. The other layers' entries in
`attentions` and `ctx.blocks` are None. Peak memory is then about one layer's attention, not L.

The logit lens (nostalgebraist 2020) applies the final norm and the unembedding to the residual
stream after each layer: what the model would predict if it stopped there. The final norm is
applied once: after the last layer the lens is the model's own logits.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from glassformer.blocks.names import sub_params
from glassformer.blocks.norm import norm_forward
from glassformer.blocks.residual import attention_weights, layer_input, residual_after
from glassformer.errors import GlassformerError
from glassformer.models.family import CAUSAL, ENCODER, ENCODER_DECODER
from glassformer.models.common import head_input, lm_head_forward
from glassformer.ops.embedding import embedding_forward
from glassformer.ops.softmax import softmax_forward
from glassformer.viewer.seq2seq_inspection import inspect_seq2seq
from glassformer.viewer.tokens import batch_ids, check_text, describe_tokens


CHUNK_T = 128   # positions whose (B, chunk, V) distributions the logit lens holds at once


class LogitLens(NamedTuple):
    """Per layer l (after block l), batch row b and position t; k guesses, best first."""
    ids: np.ndarray        # (L, B, T, k) token ids
    probs: np.ndarray      # (L, B, T, k) their probabilities
    rank: np.ndarray       # (L, B, T): rank of the model's final prediction (0 = top-1)
    entropy: np.ndarray    # (L, B, T): entropy of the whole distribution, in bits
    final: np.ndarray      # (B, T): the model's own prediction (argmax of its logits)
    layers: tuple = ()     # the layers of the rows above (all L when the lens ran on every one)


class Inspection(NamedTuple):
    """What one forward pass of `model` on `ids` computed. See the module docstring."""
    model: object                  # the Model that ran
    ids: np.ndarray                # (B, T) int64
    key_mask: np.ndarray           # (B, T) bool, False on padding
    out: np.ndarray                # logits (B, T, V) (decoders, BERT with MLM head), else hidden
    attentions: list[np.ndarray]   # L arrays (B, H, T, S) float32
    residual: list[np.ndarray]     # L + 1 arrays (B, T, C): the stream before each layer, and after
    hidden_states: list[np.ndarray]  # L + 1 arrays (B, T, C), as transformers returns them
    ctx: object                    # the forward's ctx, for the views that read more of it

    @property
    def causal(self) -> bool:
        return self.model.family.kind == CAUSAL

    @property
    def tokens(self) -> list:
        """One `Token(id, text, hex)` per position of row 0 (viewer/tokens.py)."""
        return describe_tokens(self.model.tokenizer, self.ids[0].tolist())

    def logit_lens(self, k: int = 5, layers: list[int] | None = None) -> LogitLens:
        """The top-k next tokens after every layer (or those listed); decoders only (an encoder
        has no LM head)."""
        return logit_lens(self, k, layers)

    def residual_norms(self) -> np.ndarray:
        """(L + 1, B, T): the L2 norm of the residual stream at each position, per layer."""
        return np.stack([np.linalg.norm(x, axis=-1) for x in self.residual])

    def view(self, *, lang: str | None = None, layers: str | None = None,
             heads: str | None = None, k: int = 5):
        """The model page inline (Jupyter): lang "en"/"zh" (default: the locale), layers and
        heads as "0,2,5-7" (default: all), k logit-lens guesses. See viewer/display.py."""
        from glassformer.viewer.display import inspection_view
        return inspection_view(self, lang=lang, layers=layers, heads=heads, k=k)

    def _repr_html_(self) -> str:
        from glassformer.viewer.display import html_or_note
        return html_or_note(self.view)

    def __repr__(self) -> str:
        from glassformer.viewer.display import summary
        return summary(self)


def _ids_of(model, text_or_ids) -> np.ndarray:
    """(1, T) int64 ids from a text (encoded with the model's tokenizer) or one id sequence."""
    if isinstance(text_or_ids, str):
        check_text(model, text_or_ids,
                   empty="the text is empty: give at least one character to inspect")
        if model.family.kind == ENCODER and "[CLS]" in model.tokenizer.special_tokens:
            # as BERT reads a text, and as --objective mlm trained it: [CLS] text [SEP], and a
            # typed [MASK] is the mask token (tasks/fill_mask.py frames the same way)
            from glassformer.tasks.fill_mask import framed_ids
            return framed_ids(model.tokenizer, text_or_ids)[None]                  # (1, T)
        text_or_ids = model.tokenizer.encode(text_or_ids)
    return batch_ids(text_or_ids, what="a text", length="T")


def inspect(model, text_or_ids, *, attention_mask=None, target=None, decoder_input_ids=None,
            layers: list[int] | None = None):
    """Run `model` once on a text (or ids (T,) or (B, T)) and collect what it computed.

    attention_mask: (B, T), 1 for real tokens and 0 for padding (encoders: padding keys get
    weight 0, as in transformers).
    An encoder-decoder (arch "transformer") reads `text_or_ids` as its source and returns a
    Seq2SeqInspection (viewer/seq2seq_inspection.py): target (text or ids; default: the model's
    greedy translation) or decoder_input_ids, as transformers takes them.
    layers: a causal LM keeps only these layers (see the module docstring); others ignore it.
    """
    if model.family.kind == ENCODER_DECODER or target is not None or decoder_input_ids is not None:
        return inspect_seq2seq(model, text_or_ids, target=target,
                               decoder_input_ids=decoder_input_ids, attention_mask=attention_mask)
    if model.family.new_cache is not None:
        # note: its linear-attention layers have no attention weights to draw
        raise GlassformerError(f"the viewer draws attention layers; {model.arch} mixes Gated "
                               "DeltaNet (linear attention, no weights) with attention, which it "
                               "does not show yet")
    ids = _ids_of(model, text_or_ids)
    key_mask = np.ones(ids.shape, bool) if attention_mask is None else \
        np.asarray(attention_mask).astype(bool)
    if layers is not None and model.family.kind == CAUSAL:
        return _inspect_layers(model, ids, key_mask, attention_mask is not None, set(layers))
    out, ctx = model.forward(ids, attention_mask=None if attention_mask is None else key_mask)
    attentions = [attention_weights(block) for block in ctx.blocks]
    # a BERT with a masked-LM head returned logits: the stream ends at the head's saved input
    last = ctx.mlm.dense.x if getattr(ctx, "mlm", None) is not None else out
    residual = residual_stream(model, ctx, last)
    hidden = list(residual)
    if model.family.kind == CAUSAL:
        hidden[-1] = head_input(ctx.head)       # norm_f(x_L), the LM head's saved input
    return Inspection(model, ids, key_mask, out, attentions, residual, hidden, ctx)


def _inspect_layers(model, ids: np.ndarray, key_mask: np.ndarray, masked: bool,
                    layers: set[int]) -> Inspection:
    """A causal LM's Inspection keeping the ctx of `layers` only, the stream read as it passes
    (x_0, then each layer's output), and the logits of the last position only."""
    kept: dict[int, object] = {}
    residual: list[np.ndarray] = []

    def on_layer(i: int, ctx, x_in: np.ndarray, x_out: np.ndarray) -> None:
        if i == 0:
            residual.append(x_in)
        residual.append(x_out)
        if i in layers:
            kept[i] = ctx

    out, ctx = model.forward(ids, attention_mask=key_mask if masked else None, last_only=True,
                             on_layer=on_layer)                              # out (B, 1, V)
    blocks = [kept.get(i) for i in range(model.cfg.n_layer)]
    attentions = [None if block is None else attention_weights(block) for block in blocks]
    hidden = list(residual)
    hidden[-1] = _final_norm(model, residual[-1])     # norm_f(x_L), as the LM head reads it
    return Inspection(model, ids, key_mask, out, attentions, residual, hidden,
                      ctx._replace(blocks=blocks))


def _final_norm(model, x: np.ndarray) -> np.ndarray:
    normed, _ = norm_forward(sub_params(model.params, "norm_f."), x, model.cfg.block_config())
    return normed


def residual_stream(model, ctx, out: np.ndarray) -> list[np.ndarray]:
    """L + 1 arrays (B, T, C): the stream entering each layer, then the last layer's output."""
    if model.cfg.block_config().norm_position == "post":
        return [layer_input(block) for block in ctx.blocks] + [out]
    x = _embeddings(model.params, ctx)
    stream = [x]
    for i, block in enumerate(ctx.blocks):
        x = residual_after(block, x, sub_params(model.params, f"blocks.{i}."))
        stream.append(x)
    return stream


def _embeddings(params: dict, ctx) -> np.ndarray:
    """x_0 of a pre-norm decoder: token embeddings, plus learned positions when it has them."""
    x, _ = embedding_forward(ctx.tok.ids, params["tok_emb"])                 # (B, T, C)
    if hasattr(ctx, "pos"):
        pos, _ = embedding_forward(ctx.pos.ids, params["pos_emb"])           # (T, C)
        x = x + pos
    return x


def logit_lens(inspection: Inspection, k: int, layers: list[int] | None = None) -> LogitLens:
    """See LogitLens. One layer at a time and CHUNK_T positions at a time: a (B, CHUNK_T, V)
    distribution at once, never (B, T, V) of several layers. layers: default every layer."""
    model = inspection.model
    if not inspection.causal:
        raise GlassformerError(f"{model.arch} is an encoder: it has no LM head, so no logit lens")
    if k < 1:
        raise GlassformerError(f"k must be at least 1, got {k}")
    n_layer = len(inspection.attentions)
    layers = list(range(n_layer)) if layers is None else sorted(layers)
    t = inspection.ids.shape[1]
    chunks = [slice(start, min(start + CHUNK_T, t)) for start in range(0, t, CHUNK_T)]
    final = np.concatenate([_lens_logits(inspection, n_layer, rows).argmax(axis=-1)
                            for rows in chunks], axis=1)                     # (B, T)
    table = []
    for layer in layers:
        pieces = [_lens_row(_lens_logits(inspection, layer + 1, rows), final[:, rows], k)
                  for rows in chunks]
        table.append([np.concatenate(column, axis=1) for column in zip(*pieces)])
    ids, probs, rank, entropy = (np.stack(column) for column in zip(*table))
    return LogitLens(ids, probs, rank, entropy, final, tuple(layers))


def _lens_logits(inspection: Inspection, layer: int, rows: slice) -> np.ndarray:
    """(B, rows, V): the LM head on the stream after `layer` layers (the final norm first);
    after the last one the model's own logits where the forward kept them."""
    model = inspection.model
    if layer == len(inspection.attentions) and inspection.out.shape[1] == inspection.ids.shape[1]:
        return inspection.out[:, rows]   # the final norm is already in: the model's logits
    bcfg = model.cfg.block_config()
    normed, _ = norm_forward(sub_params(model.params, "norm_f."),
                             inspection.residual[layer][:, rows], bcfg)
    logits, _ = lm_head_forward(model.params, normed)                        # (B, rows, V)
    return logits


def _lens_row(logits: np.ndarray, final: np.ndarray, k: int):
    """Top-k ids and probabilities, the final prediction's rank, and the entropy (bits)."""
    probs, _ = softmax_forward(logits)                                       # (B, T, V)
    k = min(k, probs.shape[-1])
    top = np.argpartition(-probs, k - 1, axis=-1)[..., :k]                   # (B, T, k), unsorted
    top_probs = np.take_along_axis(probs, top, axis=-1)
    order = np.argsort(-top_probs, axis=-1, kind="stable")
    top = np.take_along_axis(top, order, axis=-1)
    top_probs = np.take_along_axis(top_probs, order, axis=-1)
    final_prob = np.take_along_axis(probs, final[..., None], axis=-1)        # (B, T, 1)
    rank = (probs > final_prob).sum(axis=-1)                                 # (B, T)
    logp = np.log2(np.maximum(probs, np.finfo(probs.dtype).tiny))
    entropy = -(probs * logp).sum(axis=-1)                                   # (B, T)
    return top, top_probs, rank, entropy.astype(np.float32)
