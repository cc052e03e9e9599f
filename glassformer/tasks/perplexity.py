"""Perplexity: the loss, perplexity and bits per byte of a causal LM on a whole text.

    glassformer.perplexity(model, text, split="val")
    # -> EvalResult(loss, perplexity, tokens, split, bytes, bits_per_byte)

The text is encoded once and cut into consecutive windows of T + 1 tokens (T = the model's
context, or --block-size); each window predicts its last T tokens from the ones before. Every
token except the first of each window is scored once, and

    loss = mean over scored tokens of -log p(token | previous tokens in its window)
    perplexity = exp(loss)
    bits per byte = total nats / ln 2 / UTF-8 bytes of the scored tokens

Loss per token depends on the tokenizer (a BPE token carries more text than a character); bits
per byte do not, so a char model and a BPE model compare on one scale. The bytes of a token are
its own bytes for a byte-level BPE, else the UTF-8 bytes of its decoded text (token_byte_lengths;
approximate for WordPiece, whose decoding drops spaces).

Non-overlapping windows are the standard, cheap estimate (a sliding window would give each token
more context and a slightly lower loss).

split: "all" scores the whole text; "train" / "val" score the part of it training uses for that
split (the first 90% / the last 10% of the ids, train/data.py's split_train_val), so `eval
--split val` on a run's own data file reproduces what its val loss estimates.

Each forward holds a batch of windows, (B, T) with B = --batch-size and T = --block-size (by
default the whole context: SmolLM2's 8,192), and every layer's attention (B, H, T, T) with it:
eval_memory_bytes estimates it and check_memory (glassformer/memory.py) refuses a batch past half
the machine before the first forward, naming --batch-size and --block-size.
"""
from __future__ import annotations

import math
from typing import Callable, NamedTuple

import numpy as np

from glassformer.errors import GlassformerError, check_choice
from glassformer.memory import check_memory
from glassformer.models.family import ENCODER, ENCODER_DECODER
from glassformer.ops.cross_entropy import cross_entropy_forward
from glassformer.tokenizers.byte_lengths import token_byte_lengths
from glassformer.train.data import split_train_val

SPLITS = ("all", "train", "val")
# Floats a forward keeps per token, layer and channel (residual, norms, q/k/v, MLP), as train's
# memory check counts them (train/runs/checks.py), plus 2 (T per head: scores, weights).
ACTIVATION_FLOATS_PER_CHANNEL = 16
FLOAT_BYTES = 4


class EvalResult(NamedTuple):
    loss: float          # mean cross-entropy, nats per token
    perplexity: float    # exp(loss)
    tokens: int          # tokens scored
    split: str           # "all" (the whole text), "train" or "val"
    bytes: int = 0       # UTF-8 bytes of the scored tokens (0: not known)
    bits_per_byte: float = float("nan")  # loss * tokens / ln 2 / bytes


def count_windows(n_ids: int, block_size: int) -> int:
    """How many windows of block_size + 1 ids (overlapping by one) fit in n_ids."""
    return max(0, (n_ids - 1) // block_size)


def select_split(ids: np.ndarray, split: str) -> np.ndarray:
    """The ids `split` names: all of them, or training's train / val part."""
    check_choice("split", split, SPLITS)
    if split == "all":
        return ids
    train, val = split_train_val(ids)
    return train if split == "train" else val


def evaluate_ids(model, ids: np.ndarray, *, block_size: int | None = None,
                 batch_size: int = 8, split: str = "all",
                 on_batch: Callable[[int, int], None] | None = None,
                 byte_lengths: np.ndarray | None = None) -> EvalResult:
    """Mean next-token loss of `model` over `ids` (1-D, or the `split` of them), in windows of
    block_size + 1. on_batch(windows done, windows in all) is called after each forward pass.
    byte_lengths: (V,) bytes per id (token_byte_lengths), for bits per byte."""
    if batch_size < 1 or (block_size is not None and block_size < 1):
        raise GlassformerError(f"batch size and block size must be at least 1, got "
                               f"{batch_size} and {block_size}")
    check_causal(model)
    t = block_size or model.context_len
    if t > model.context_len:
        raise GlassformerError(f"block size {t} is longer than the model's context "
                               f"max_seq_len={model.context_len}")
    ids = select_split(np.asarray(ids, dtype=np.int64), split)
    n_windows = count_windows(len(ids), t)
    if n_windows < 1:
        what = "the text" if split == "all" else f"the {split} split of the text"
        raise GlassformerError(f"{what} has {len(ids)} tokens; at least {t + 1} are needed "
                               f"for one window of block size {t}")
    rows = min(batch_size, n_windows)
    check_memory(eval_memory_bytes(model, rows, t),
                 f"eval's forward of {rows:,} windows x {t:,} tokens", "lower --batch-size or "
                 "--block-size (the default block is the model's whole context)")
    windows = ids[:n_windows * t + 1]
    inputs = windows[:-1].reshape(n_windows, t)                 # (N, T)
    targets = windows[1:].reshape(n_windows, t)                 # (N, T), shifted by one
    total = 0.0
    for start in range(0, n_windows, batch_size):
        x, y = inputs[start:start + batch_size], targets[start:start + batch_size]
        logits, _ = model.forward(x)                            # (b, T, V)
        loss, _ = cross_entropy_forward(logits, y)
        total += float(loss) * y.size
        if on_batch:
            on_batch(start + len(x), n_windows)
    mean = total / targets.size
    n_bytes = 0 if byte_lengths is None else int(byte_lengths[windows[1:]].sum())
    bpb = total / math.log(2) / n_bytes if n_bytes else float("nan")
    return EvalResult(loss=mean, perplexity=math.exp(mean), tokens=int(targets.size), split=split,
                      bytes=n_bytes, bits_per_byte=bpb)


def eval_memory_bytes(model, rows: int, t: int) -> int:
    """Rough bytes one forward of `rows` windows of t tokens holds: per layer ~16 C floats and
    the (H, T) attention scores and weights per token, and the logits with their softmax."""
    cfg = model.cfg
    n_head = cfg.block_config().n_head
    per_layer = ACTIVATION_FLOATS_PER_CHANNEL * cfg.d_model + 2 * n_head * t
    return FLOAT_BYTES * rows * t * (cfg.n_layer * per_layer + 2 * cfg.vocab_size)


def check_causal(model) -> None:
    """One line for a model that predicts no next token (an encoder, an encoder-decoder)."""
    if model.family.kind == ENCODER:
        raise GlassformerError("eval measures next-token loss, which a BERT encoder does not "
                               "predict; judge a masked-LM BERT with fill-mask "
                               "(python -m bench.bert_fill_mask_eval --model RUN)")
    if model.family.kind == ENCODER_DECODER:
        raise GlassformerError("eval measures next-token loss on a text; an encoder-decoder is "
                               "judged on pairs (python -m bench.g2p_eval --model RUN, "
                               "python -m bench.couplets_eval --model RUN)")


def perplexity(model, text: str, **kwargs) -> EvalResult:
    """Encode `text` with the model's tokenizer, then `evaluate_ids` (its keyword arguments:
    block_size, batch_size, split, on_batch)."""
    check_causal(model)
    if model.tokenizer is None:
        raise GlassformerError("this model has no tokenizer, so it cannot read text")
    return evaluate_ids(model, np.array(model.tokenizer.encode(text)),
                        byte_lengths=token_byte_lengths(model.tokenizer), **kwargs)
