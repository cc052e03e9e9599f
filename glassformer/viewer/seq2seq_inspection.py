"""`inspect(model, source, target=...)` for an encoder-decoder (models/seq2seq.py: the paper's
Transformer, MarianMT, BART): its three kinds of attention, read from its own forward.

One forward pass of the whole model in eval mode on (source ids, decoder input ids), then every
weight is read from the ctx that `seq2seq.backward` would use (no second model, no hooks), with
the names transformers' seq2seq models give them under output_attentions=True (and, for
post-norm models, output_hidden_states=True: encoder_hidden_states, decoder_hidden_states):

    encoder_attentions[l]  attention_weights(ctx.encoder.blocks[l])               (B, H, S, S)
                           bidirectional: every source token reads every other (padding never)
    decoder_attentions[l]  attention_weights(ctx.decoder.blocks[l])               (B, H, T, T)
                           causal: decoder position t reads positions 0..t (the lower triangle)
    cross_attentions[l]    attention_weights(ctx.decoder.blocks[l], cross=True)   (B, H, T, S)
                           row t: which source tokens decoder position t reads (all of them;
                           only source padding is masked)

The decoder's positions, for a target y_1 .. y_n (teacher forcing, as in training):

    decoder input   <start>  y_1  ...  y_n          (decoder_input_ids, T = n + 1)
    writes          y_1      y_2  ...  </s>         (output_ids: the next input, </s> last)

so row t of a cross-attention table is "the output token y_{t+1} (or </s>) reads these source
tokens". Without a target the model's own greedy translation (glassformer.translate, at most
max_seq_len - 1 tokens, so the row that writes </s> fits) is the target, and output_ids are the
model's own argmax at each position (its translation, then </s>, or the token it would write
next if it stopped at the length limit): the page then shows what the model read while writing
its own output.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from glassformer.blocks.attention import attention_inputs
from glassformer.blocks.residual import attention_block_ctx, attention_weights, layer_input
from glassformer.errors import GlassformerError
from glassformer.models.common import head_input
from glassformer.models.family import ENCODER_DECODER
from glassformer.viewer.tokens import batch_ids, check_text, describe_tokens


class Seq2SeqInspection(NamedTuple):
    """What one forward pass of an encoder-decoder computed. See the module docstring."""
    model: object
    source_ids: np.ndarray           # (B, S) int64
    source_mask: np.ndarray          # (B, S) bool, False on source padding
    decoder_input_ids: np.ndarray    # (B, T) int64: <start> then the target
    output_ids: np.ndarray           # (B, T) int64: what each decoder position writes
    out: np.ndarray                  # logits (B, T, V)
    encoder_attentions: list[np.ndarray]   # L_enc arrays (B, H, S, S) float32
    decoder_attentions: list[np.ndarray]   # L_dec arrays (B, H, T, T) float32
    cross_attentions: list[np.ndarray]     # L_dec arrays (B, H, T, S) float32
    ctx: object                      # the forward's Seq2SeqCtx

    @property
    def encoder_hidden_states(self) -> list[np.ndarray]:
        """L_enc + 1 arrays (B, S, C), as transformers' encoder_hidden_states: each encoder
        layer's input, then the encoder's output (the memory every cross-attention read)."""
        inputs = [_layer_input(block, "encoder") for block in self.ctx.encoder.blocks]
        first_cross = attention_block_ctx(self.ctx.decoder.blocks[0], cross=True)
        _, memory = attention_inputs(first_cross)                          # (B, S, C)
        return inputs + [memory]

    @property
    def decoder_hidden_states(self) -> list[np.ndarray]:
        """L_dec + 1 arrays (B, T, C), as transformers' decoder_hidden_states: each decoder
        layer's input, then the LM head's input."""
        inputs = [_layer_input(block, "decoder") for block in self.ctx.decoder.blocks]
        return inputs + [head_input(self.ctx.head)]

    @property
    def source_tokens(self) -> list:
        """One `Token(id, text, hex, whole)` per source position of row 0."""
        return describe_tokens(self.model.tokenizer, self.source_ids[0].tolist())

    @property
    def decoder_tokens(self) -> list:
        """One Token per decoder input of row 0 (the keys of decoder self-attention)."""
        return describe_tokens(self.model.tokenizer, self.decoder_input_ids[0].tolist())

    @property
    def output_tokens(self) -> list:
        """One Token per decoder position of row 0: what it writes (the rows of every table)."""
        return describe_tokens(self.model.tokenizer, self.output_ids[0].tolist())

    def view(self, *, lang: str | None = None, layers: str | None = None,
             heads: str | None = None):
        """The encoder-decoder page inline (Jupyter): cross-attention and both self-attentions;
        lang "en"/"zh" (default: the locale). See viewer/display.py."""
        from glassformer.viewer.display import seq2seq_view
        return seq2seq_view(self, lang=lang, layers=layers, heads=heads)

    def _repr_html_(self) -> str:
        from glassformer.viewer.display import html_or_note
        return html_or_note(self.view)

    def __repr__(self) -> str:
        from glassformer.viewer.display import summary
        return summary(self)


def _layer_input(block_ctx, side: str) -> np.ndarray:
    """A post-norm layer's input, which its ctx keeps (blocks/residual.py: layer_input). A
    pre-norm layer's input is not kept (its norm saves x-hat only)."""
    x = layer_input(block_ctx)
    if x is None:
        raise GlassformerError(f"the {side}'s hidden states are read for post-norm models "
                               "(the paper, Marian, BART); this one is pre-norm")
    return x


def _source_ids(model, source) -> np.ndarray:
    """(B, S) int64 from a text (the model's tokenizer) or ids (S,) / (B, S)."""
    if isinstance(source, str):
        check_text(model, source, empty="the source text is empty: give at least one character")
        source = model.tokenizer.encode(source)
    return batch_ids(source, what="a source text", length="S")


def _target_rows(model, target, batch: int) -> list[list[int]]:
    """The target token ids of each row (no <start>, no </s>), from a text or ids."""
    if isinstance(target, str):
        if model.tokenizer is None or not hasattr(model.tokenizer, "encode_target"):
            raise GlassformerError("this model has no pair tokenizer to encode a target text "
                                   "with: give the target as token ids")
        target = [model.tokenizer.encode_target(target)]
    rows = np.asarray(target, dtype=np.int64)
    rows = rows[None] if rows.ndim == 1 else rows                            # (T,) -> (1, T)
    if rows.ndim != 2 or rows.shape[0] != batch:
        raise GlassformerError(f"expected {batch} target row(s) of ids, got shape {rows.shape}")
    return rows.tolist()


def _translated(model, source_ids: np.ndarray, source_mask: np.ndarray) -> list[list[int]]:
    """The model's greedy translation of each source row (its real tokens only)."""
    from glassformer.tasks.translate import translate_ids  # a task, beside the viewer
    sources = [row[keep].tolist() for row, keep in zip(source_ids, source_mask)]
    return translate_ids(model, sources, beam=1, max_new_tokens=model.cfg.max_seq_len - 1)


def _decoder_rows(cfg, targets: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    """Targets -> (decoder_input_ids, output_ids), both (B, T); shorter rows padded with pad_id
    after their </s> (causal attention: a position never reads the padding after it)."""
    width = 1 + max(len(row) for row in targets)
    inputs = np.full((len(targets), width), cfg.pad_id, np.int64)
    outputs = np.full((len(targets), width), cfg.pad_id, np.int64)
    for i, row in enumerate(targets):  # note: one row per target, building a small batch
        inputs[i, :len(row) + 1] = [cfg.decoder_start_id] + row
        outputs[i, :len(row) + 1] = row + [cfg.eos_id]
    return inputs, outputs


def inspect_seq2seq(model, source, *, target=None, decoder_input_ids=None,
                    attention_mask=None) -> Seq2SeqInspection:
    """Run the encoder-decoder once and collect its three kinds of attention.

    source: a text or ids (S,) / (B, S). attention_mask (B, S): 1 for real source tokens
    (default: ids != pad_id). Then one of:
      target            a text (the model's pair tokenizer) or target ids (T,) / (B, T);
                        the decoder reads <start> + target and writes target + </s>
      decoder_input_ids ids (B, T) given as is, as transformers takes them; output_ids are the
                        next inputs, then </s>
      neither           the model's own greedy translation is the target, and output_ids
                        the model's argmax at each position
    """
    if model.family.kind != ENCODER_DECODER:
        raise GlassformerError(f"target= and decoder_input_ids= are for encoder-decoders; "
                               f"{model.arch} reads one sequence")
    cfg = model.cfg
    src = _source_ids(model, source)
    mask = src != cfg.pad_id if attention_mask is None else np.asarray(attention_mask, bool)
    if mask.shape != src.shape:
        raise GlassformerError(f"attention_mask has shape {mask.shape}, the source {src.shape}")
    if decoder_input_ids is not None:
        if target is not None:
            raise GlassformerError("give target or decoder_input_ids, not both")
        dec_in = np.asarray(decoder_input_ids, dtype=np.int64)
        dec_in = dec_in[None] if dec_in.ndim == 1 else dec_in                # (T,) -> (1, T)
        if dec_in.ndim != 2 or dec_in.shape[0] != src.shape[0] or dec_in.shape[1] == 0:
            raise GlassformerError(f"decoder_input_ids must be (B, T) with B = {src.shape[0]} "
                                   f"and T >= 1, got shape {dec_in.shape}")
        eos = np.full((dec_in.shape[0], 1), cfg.eos_id, np.int64)
        dec_out = np.concatenate([dec_in[:, 1:], eos], axis=1)      # (B, T): the next inputs
    else:
        targets = _translated(model, src, mask) if target is None else \
            _target_rows(model, target, src.shape[0])
        dec_in, dec_out = _decoder_rows(cfg, targets)
    if dec_in.shape[1] > cfg.max_seq_len:
        raise GlassformerError(f"the target takes {dec_in.shape[1]} decoder positions, past this "
                               f"model's {cfg.max_seq_len}")
    logits, ctx = model.family.forward(model.params, (src, dec_in), cfg, src_mask=mask)
    if target is None and decoder_input_ids is None:
        dec_out = logits.argmax(axis=-1)         # (B, T): what the model itself writes there
    return Seq2SeqInspection(
        model, src, mask, dec_in, dec_out, logits,
        encoder_attentions=[attention_weights(block) for block in ctx.encoder.blocks],
        decoder_attentions=[attention_weights(block) for block in ctx.decoder.blocks],
        cross_attentions=[attention_weights(block, cross=True) for block in ctx.decoder.blocks],
        ctx=ctx)
