"""Sentence embeddings with a BERT encoder, as sentence-transformers computes them.

    texts -> WordPiece ids [CLS] ... [SEP], cut to max_length, padded to the batch's longest
          -> BERT encoder -> last hidden state (B, T, C)
          -> mean over the real tokens (padding masked out)         (B, C)
          -> divide by the L2 norm                                  (B, C), unit length

That is all-MiniLM-L6-v2's pipeline (modules.json: Transformer, Pooling with mean tokens,
Normalize), max_seq_length 256. Because the vectors have unit length, the cosine similarity of
two texts is their dot product. Pooling and normalisation are the BERT module's `mean_pool` and
`l2_normalize`; this file only batches texts through them.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from glassformer.errors import GlassformerError
from glassformer.models.bert import encoder_forward, l2_normalize, mean_pool
from glassformer.models.family import ENCODER

MAX_LENGTH = 256       # sentence-transformers' max_seq_length for all-MiniLM-L6-v2
BATCH_SIZE = 32        # texts per forward pass (bounds memory; results do not depend on it)


def max_length_of(path: str | Path, default: int = MAX_LENGTH) -> int:
    """The max_seq_length of sentence_bert_config.json in `path`, else `default`."""
    config = Path(path) / "sentence_bert_config.json"
    if config.is_file():
        return int(json.loads(config.read_text(encoding="utf-8")).get("max_seq_length", default))
    return default


def embed(model, texts: list[str], *, max_length: int = MAX_LENGTH,
          batch_size: int = BATCH_SIZE) -> np.ndarray:
    """texts (N strings) -> unit-length embeddings (N, C), float32.

    Texts longer than max_length tokens ([CLS] and [SEP] included) are cut, as
    sentence-transformers does.
    """
    if model.family.kind != ENCODER:
        raise GlassformerError(f"embeddings need an encoder (BERT) model; this one is "
                               f"{model.arch}")
    tokenizer = model.tokenizer
    if tokenizer is None or not hasattr(tokenizer, "encode_batch"):
        raise GlassformerError("embeddings need the model's WordPiece tokenizer (vocab.txt or "
                               "tokenizer.json beside the weights)")
    if not texts:
        raise GlassformerError("give at least one text to embed")
    max_length = min(max_length, model.cfg.max_seq_len)
    chunks = [embed_batch(model, texts[start:start + batch_size], max_length)
              for start in range(0, len(texts), batch_size)]
    return np.concatenate(chunks, axis=0)                 # N_chunks x (b, C) -> (N, C)


def embed_batch(model, texts: list[str], max_length: int) -> np.ndarray:
    """One forward pass over a batch of texts -> (b, C)."""
    encodings = model.tokenizer.encode_batch(texts, max_length=max_length, truncation=True,
                                             padding="longest")
    ids = np.array([e.ids for e in encodings], dtype=np.int64)                 # (b, T)
    mask = np.array([e.attention_mask for e in encodings], dtype=bool)         # (b, T)
    types = np.array([e.type_ids for e in encodings], dtype=np.int64)          # (b, T)
    # the encoder alone: a BERT with a masked-LM head would give logits from model.forward
    hidden, _ = encoder_forward(model.params, ids, model.cfg, token_type_ids=types,
                                key_mask=mask)                                 # (b, T, C)
    return l2_normalize(mean_pool(hidden, mask))                               # (b, C)


def cosine_similarity(embeddings: np.ndarray) -> np.ndarray:
    """(N, C) embeddings -> (N, N) cosine similarities: dot products of the unit vectors."""
    unit = l2_normalize(embeddings)
    return unit @ unit.T                                  # (N, C) @ (C, N) -> (N, N)
