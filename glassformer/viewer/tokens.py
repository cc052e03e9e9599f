"""Tokens as a reader should see them, and display groups whose texts join back to the input.

Byte-level BPE (GPT-2, LLaMA 3, SmolLM2, Qwen2) cuts text into bytes, not characters: a Chinese
character is 3 UTF-8 bytes and often spans two tokens. Decoding one such token alone would give
U+FFFD. Instead:

    token   bytes       text shown
    0       e6 b0       ⟨E6 B0⟩      a token that is not whole characters shows its bytes in hex
    1       b4          ⟨B4⟩
            group: tokens 0-1, text "水"  (adjacent tokens joined until their bytes are UTF-8)

The groups' texts join back to the decoded text exactly; the page labels each group once. A
WordPiece tokenizer (BERT) lower-cases, strips accents and adds [CLS]/[SEP]: its groups are
aligned to the original text by matching each piece, so they join back to the text the user gave
too ([CLS], [SEP] and padding get an empty text).

`check_text` and `batch_ids` check what `inspect` is given: a text it can encode, or ids (T,) or
(B, T), which become the (B, T) batch it runs.
"""
from __future__ import annotations

import codecs
import unicodedata
from typing import NamedTuple

import numpy as np

from glassformer.errors import GlassformerError
from glassformer.tokenizers.wordpiece import WordPieceTokenizer


class Token(NamedTuple):
    id: int
    text: str      # its characters, or its bytes as ⟨E6 B0⟩ when they are not whole characters
    hex: str       # its bytes in hex (byte-level BPE), '' for other tokenizers
    whole: bool    # True when `text` is characters


class Group(NamedTuple):
    text: str             # characters; the groups' texts join back to the input
    tokens: list[int]     # positions of the tokens that make it up


def check_text(model, text: str, *, empty: str) -> None:
    """Raise unless `model` can encode `text`: it is not empty (the error then says `empty`) and
    a tokenizer came with the model."""
    if not text:
        raise GlassformerError(empty)
    if model.tokenizer is None:
        raise GlassformerError("this model came without a tokenizer: pass token ids instead")


def batch_ids(ids, *, what: str, length: str) -> np.ndarray:
    """(B, T) int64 from ids (T,) or (B, T) with T >= 1. what, length: the error's words, e.g.
    "a text" and "T" (or "a source text" and "S")."""
    ids = np.asarray(ids, dtype=np.int64)
    if ids.ndim == 1:
        ids = ids[None]                                                     # (T,) -> (1, T)
    if ids.ndim != 2 or ids.shape[1] == 0:
        raise GlassformerError(f"expected {what} or ids of shape ({length},) or (B, {length}) "
                               f"with {length} >= 1, got shape {ids.shape}")
    return ids


def hex_label(data: bytes) -> str:
    """b'\\xe6\\xb0' -> '⟨E6 B0⟩'."""
    return "⟨" + data.hex(" ").upper() + "⟩"


def _strict(data: bytes) -> str | None:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def describe_tokens(tokenizer, ids: list[int]) -> list[Token]:
    """One Token per id; never U+FFFD."""
    if tokenizer is None:
        return [Token(i, f"#{i}", "", True) for i in ids]
    if not hasattr(tokenizer, "token_bytes"):
        return [Token(i, tokenizer.id_to_piece(i), "", True) for i in ids]
    tokens = []
    for token_id in ids:
        data = tokenizer.token_bytes(token_id)
        text = _strict(data)
        tokens.append(Token(token_id, hex_label(data) if text is None else text,
                            data.hex(" "), text is not None))
    return tokens


def token_groups(tokenizer, ids: list[int], text: str | None = None) -> list[Group]:
    """Display groups of the tokens (see the module docstring)."""
    if isinstance(tokenizer, WordPieceTokenizer) and text is not None:
        return _aligned_groups(tokenizer, ids, text)
    if tokenizer is None or not hasattr(tokenizer, "token_bytes"):
        groups = [Group(token.text, [i]) for i, token in enumerate(describe_tokens(tokenizer, ids))]
        return _unframed(tokenizer, groups, text)
    groups, pending, data = [], [], b""
    for position, token_id in enumerate(ids):
        pending.append(position)
        data += tokenizer.token_bytes(token_id)
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        decoder.decode(data, final=False)
        if decoder.getstate()[0]:      # bytes of a character still wait for the rest of it
            continue
        groups.append(_bytes_group(data, pending))
        pending, data = [], b""
    if pending:                        # the ids end inside a character
        groups.append(_bytes_group(data, pending))
    return groups


def _unframed(tokenizer, groups: list[Group], text: str | None) -> list[Group]:
    """A BERT's [CLS] ... [SEP] added around a text (a char-level masked-LM run's tokenizer):
    those two groups get an empty text, so the groups join back to the text as typed."""
    specials = getattr(tokenizer, "special_tokens", {})
    if text is None or "".join(g.text for g in groups) == text or len(groups) < 2:
        return groups
    framed = groups[0].text == "[CLS]" and groups[-1].text == "[SEP]"
    if framed and "[CLS]" in specials and "[SEP]" in specials:
        groups = [Group("", groups[0].tokens)] + groups[1:-1] + [Group("", groups[-1].tokens)]
    return groups


def _bytes_group(data: bytes, positions: list[int]) -> Group:
    text = _strict(data)
    return Group(hex_label(data) if text is None else text, positions)


def _normalized(ch: str) -> str:
    """One character as BERT's uncased basic tokenizer sees it: accents stripped, lower case."""
    decomposed = unicodedata.normalize("NFD", ch)
    kept = "".join(c for c in decomposed if unicodedata.category(c) != "Mn")
    return kept.lower()


def _aligned_groups(tokenizer: WordPieceTokenizer, ids: list[int], text: str) -> list[Group]:
    """One group per token, its text the slice of `text` from the end of the previous match
    to the end of this token's piece (so spaces before a word belong to it)."""
    lowercase = tokenizer.basic_options["lowercase"]
    normal, origin = "", []          # the normalised text, and each of its chars' index in text
    for index, ch in enumerate(text):
        piece = _normalized(ch) if lowercase else ch
        normal += piece
        origin.extend([index] * len(piece))
    specials = set(tokenizer.specials.values())
    groups, cursor, start = [], 0, 0
    for position, token_id in enumerate(ids):
        piece = tokenizer.id_to_piece(token_id).removeprefix(tokenizer.prefix)
        found = -1 if token_id in specials else normal.find(piece, cursor)
        if found < 0:
            groups.append(Group("", [position]))
            continue
        cursor = found + len(piece)
        end = origin[cursor - 1] + 1
        groups.append(Group(text[start:end], [position]))
        start = end
    if start < len(text):            # what no piece matched (trailing spaces) joins the last text
        last = max((i for i, group in enumerate(groups) if group.text), default=len(groups) - 1)
        groups[last] = Group(groups[last].text + text[start:], groups[last].tokens)
    return groups
