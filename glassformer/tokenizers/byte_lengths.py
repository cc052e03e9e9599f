"""How many UTF-8 bytes each token stands for: the scale on which bits per byte compare a char
model with a BPE model (a BPE token carries more text than a character).

The bytes of a token are its own bytes for a byte-level BPE (exact, a token holding half a
character included), else the UTF-8 bytes of its decoded text (approximate for WordPiece, whose
decoding drops spaces).
"""
from __future__ import annotations

import numpy as np


def token_byte_lengths(tokenizer) -> np.ndarray:
    """(V,) int64: the UTF-8 bytes each id of `tokenizer` stands for."""
    pieces = getattr(tokenizer, "id_to_bytes", None)
    if pieces is not None:  # byte-level BPE: exact, a token holding half a character included
        return np.array([len(piece or b"") for piece in pieces], dtype=np.int64)
    return np.array([len(tokenizer.decode([token_id]).encode("utf-8"))
                     for token_id in range(tokenizer.vocab_size)], dtype=np.int64)


def tokens_per_byte(ids: np.ndarray, byte_lengths: np.ndarray) -> float:
    """How many tokens `ids` spends per UTF-8 byte of the text it encodes."""
    n_bytes = int(byte_lengths[np.asarray(ids, dtype=np.int64)].sum())
    return len(ids) / n_bytes if n_bytes else float("nan")
