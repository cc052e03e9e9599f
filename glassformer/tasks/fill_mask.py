"""Fill-mask: what a masked-LM BERT puts in each [MASK] of a text, as transformers'
pipeline("fill-mask") computes it.

    "床前明月[MASK]，疑是地上霜。"
        -> ids [CLS] 床 前 明 月 [MASK] ， 疑 ... 。 [SEP]          (T,), one sequence
        -> BERT encoder + MLM head -> logits (T, V)                   models/bert.py forward
        -> softmax over the whole vocabulary at each [MASK] position  (M, V)
        -> the top_k ids of each, best first, with their probabilities

    glassformer.fill_mask(model, "床前明月[MASK]，疑是地上霜。", top_k=3)
    # [[("光", 0.41), ("中", 0.07), ("下", 0.05)]]      one list per [MASK], in text order

The model is a BERT with its masked-LM head: a Hugging Face BertForMaskedLM folder or a run of
`glassformer train --arch bert --objective mlm`. Its tokenizer frames the text: WordPiece adds
[CLS] and [SEP] itself; the char tokenizer of an MLM run does not, so they are added here, as
BertTokenizer does. "[MASK]" (and the other special tokens) typed in the text are the special
tokens, as in transformers.
"""
from __future__ import annotations

import numpy as np

from glassformer.errors import GlassformerError
from glassformer.models.family import ENCODER
from glassformer.ops.softmax import softmax_forward
from glassformer.tasks.results import FillMaskResult

MASK = "[MASK]"


def _check_model(model) -> None:
    encoder = model.family.kind == ENCODER
    if not encoder or not getattr(model.cfg, "mlm_head", False):
        kind = "a BERT without its masked-LM head" if encoder else model.arch
        raise GlassformerError(f"fill-mask needs a BERT with a masked-LM head (a BertForMaskedLM "
                               f"folder or an --objective mlm run); this model is {kind}")
    if model.tokenizer is None:
        raise GlassformerError("fill-mask needs the model's tokenizer (vocab.txt or "
                               "tokenizer.json beside the weights)")
    if MASK not in model.tokenizer.special_tokens:
        raise GlassformerError(f"the model's tokenizer has no {MASK} token, so nothing can be "
                               "masked")


def framed_ids(tokenizer, text: str) -> np.ndarray:
    """[CLS] text [SEP] as ids (T,): the tokenizer's own framing, or added here."""
    ids = list(tokenizer.encode(text, allowed_special="all"))
    specials = tokenizer.special_tokens
    cls, sep = specials.get("[CLS]"), specials.get("[SEP]")
    if cls is not None and ids[:1] != [cls]:
        ids = [cls] + ids
    if sep is not None and ids[-1:] != [sep]:
        ids = ids + [sep]
    return np.array(ids, dtype=np.int64)


def mask_positions(model, text: str) -> tuple[np.ndarray, np.ndarray]:
    """(ids (T,), positions of the [MASK] tokens (M,)), with one-line errors for bad input."""
    _check_model(model)
    ids = framed_ids(model.tokenizer, text)
    positions = np.flatnonzero(ids == model.tokenizer.special_tokens[MASK])
    if len(positions) == 0:
        raise GlassformerError(f"the text has no {MASK}: write {MASK} where a token should be "
                               f"guessed, e.g. 床前明月{MASK}，疑是地上霜。")
    if len(ids) > model.cfg.max_seq_len:
        raise GlassformerError(f"the text is {len(ids)} tokens with [CLS] and [SEP], longer "
                               f"than the model's position table (max_seq_len "
                               f"{model.cfg.max_seq_len})")
    return ids, positions


def mask_probabilities(model, text: str) -> np.ndarray:
    """(M, V) float32: the softmax over the vocabulary at each [MASK], in text order."""
    ids, positions = mask_positions(model, text)
    logits = model(ids[None])[0]                                   # (1, T) -> (T, V)
    probs, _ = softmax_forward(logits[positions])                  # (M, V)
    return probs


def fill_mask(model, text: str, top_k: int = 5) -> list[list[tuple[str, float]]]:
    """For each [MASK] in `text`, in order: the top_k (token text, probability), best first.

    Probabilities are over the model's whole vocabulary, as transformers' pipeline; ids past the
    tokenizer's vocabulary (an --tokenizer run pads the model's to a multiple of 64) are never
    proposed.
    """
    if top_k < 1:
        raise GlassformerError(f"top_k must be at least 1, got {top_k}")
    probs = mask_probabilities(model, text)
    tokenizer = model.tokenizer
    usable = probs[:, :tokenizer.vocab_size]                        # (M, V_tokenizer)
    k = min(top_k, usable.shape[1])
    best = np.argsort(-usable, axis=1, kind="stable")[:, :k]       # (M, k), best first
    guesses = [[(tokenizer.id_to_piece(int(token)), float(row[token])) for token in top]
               for row, top in zip(usable, best)]
    return FillMaskResult(guesses, text)          # a list that also draws itself in Jupyter
