"""A readable view of how a tokenizer cut a text: one row per token (`tokenizer encode` prints it).

    glassformer tokenizer encode --tokenizer gpt2 "Hello world 汉字"
       #      id  piece   text       bytes
       0   15496  Hello   "Hello"    48 65 6c 6c 6f
       1     995  Ġworld  " world"   20 77 6f 72 6c 64
       2   10545  Ġæ      " 汉" 1/3  20 e6
       3     109  ±       " 汉" 2/3  b1
       4     231  ī       " 汉" 3/3  89
       5   27764  åŃ      "字" 1/2   e5 ad
       6     245  Ĺ       "字" 2/2   97

`piece` is the vocabulary's own spelling; for byte-level BPE `text` decodes the token's bytes (a
character cut across tokens shows in each of them with its part) and `bytes` lists them in hex.
A control token (a special token: `<|im_end|>`, `[CLS]`) is marked `control` after its text;
typed in the text it is plain text unless allowed (`--allow-special`; tokenizers/base.py).
"""
from __future__ import annotations

import json
import unicodedata
from typing import NamedTuple

from glassformer.tokenizers.base import AllowedSpecial, Tokenizer
from glassformer.tokenizers.bpe import BPETokenizer
from glassformer.tokenizers.bytelevel import readable_pieces
from glassformer.tokenizers.char import CharTokenizer
from glassformer.tokenizers.wordpiece import WordPieceTokenizer


class TokenRow(NamedTuple):
    """One token of an encoded text."""
    id: int
    piece: str          # vocabulary spelling ('Ġworld', '##ing', '[CLS]')
    text: str           # what it stands for, readable ('汉' for both halves of a split character)
    part: str           # '' or 'k/n' when the token holds the k-th of n parts of `text`
    hex_bytes: str      # byte-level BPE only: the token's bytes in hex; '' otherwise
    control: bool       # a special (control) token, which plain text never produces


def describe(tokenizer: Tokenizer) -> str:
    """One line naming the tokenizer's kind, vocabulary size and pre-tokenizer."""
    if isinstance(tokenizer, BPETokenizer):
        pattern = tokenizer.pretokenizer.name or "custom regex"
        kind = f"byte-level BPE, {len(tokenizer.merges)} merges, pre-tokenizer {pattern}"
    elif isinstance(tokenizer, WordPieceTokenizer):
        kind = "WordPiece (BERT)"
    elif isinstance(tokenizer, CharTokenizer):
        kind = "characters"
    else:
        kind = type(tokenizer).__name__
    n_special = len(tokenizer.special_tokens)
    return f"{kind}; {tokenizer.vocab_size} ids, {n_special} special token{'s' * (n_special != 1)}"


def token_rows(tokenizer: Tokenizer, text: str,
               allowed_special: AllowedSpecial = ()) -> list[TokenRow]:
    """Encode `text` (special tokens as `allowed_special` says) and describe every token."""
    ids = tokenizer.encode(text, allowed_special)
    pieces = [tokenizer.id_to_piece(token_id) for token_id in ids]
    control_ids = set(tokenizer.special_tokens.values())
    if not isinstance(tokenizer, BPETokenizer):
        return [TokenRow(token_id, piece, piece, "", "", token_id in control_ids)
                for token_id, piece in zip(ids, pieces)]
    raw = [tokenizer.token_bytes(token_id) for token_id in ids]
    rows = []
    for token_id, piece, data, shown in zip(ids, pieces, raw, readable_pieces(raw)):
        part = f"{shown.part}/{shown.parts}" if shown.parts > 1 else ""
        rows.append(TokenRow(token_id, piece, shown.text, part, data.hex(" "),
                             token_id in control_ids))
    return rows


def typed_specials(tokenizer: Tokenizer, text: str) -> list[str]:
    """The special-token strings `text` spells, each once, in order of first appearance."""
    found = [(text.find(token), token) for token in tokenizer.special_tokens if token in text]
    return [token for _, token in sorted(found)]


def visible(text: str) -> str:
    """Quoted, with newlines, tabs and other controls escaped but every other character kept."""
    return json.dumps(text, ensure_ascii=False)


def display_width(text: str) -> int:
    """Terminal columns `text` takes: East Asian wide and full-width characters take two."""
    return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text)


def pad(text: str, width: int) -> str:
    return text + " " * max(0, width - display_width(text))


def format_rows(rows: list[TokenRow]) -> str:
    """The rows as an aligned table, one token a line."""
    pieces = [row.piece for row in rows]
    texts = [f"{visible(row.text)} {row.part}{' control' * row.control}".rstrip() for row in rows]
    piece_width = max([display_width(piece) for piece in pieces] + [5])
    text_width = max([display_width(text) for text in texts] + [4])
    lines = [f"{'#':>4} {'id':>7}  {pad('piece', piece_width)}  {pad('text', text_width)}  bytes"]
    for position, (row, piece, text) in enumerate(zip(rows, pieces, texts)):
        lines.append(f"{position:>4} {row.id:>7}  {pad(piece, piece_width)}  "
                     f"{pad(text, text_width)}  {row.hex_bytes}".rstrip())
    return "\n".join(lines)


def is_whole_text(data: bytes) -> bool:
    """Whether `data` is whole UTF-8 characters (no character cut at either end)."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def readable_bytes(data: bytes) -> str:
    """A token's bytes: quoted text if they are whole UTF-8 characters, else hex ('e6 b1')."""
    return visible(data.decode("utf-8")) if is_whole_text(data) else data.hex(" ")


def readable_merge(left: bytes, right: bytes) -> str:
    """One merge as `tokenizer train` prints it; hex parts also show the character they make.

    >>> readable_merge(b" ", b"the"), readable_merge(b"\\xe6", b"\\xb1")
    ('" " + "the"', 'e6 + b1')
    >>> readable_merge(b"\\xe6\\xb1", b"\\x89")
    'e6 b1 + 89 = "汉"'
    """
    shown = f"{readable_bytes(left)} + {readable_bytes(right)}"
    parts_whole = is_whole_text(left) and is_whole_text(right)
    if not parts_whole and is_whole_text(left + right):
        shown += f" = {readable_bytes(left + right)}"
    return shown
