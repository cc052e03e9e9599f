"""Pair tokenizer: one vocabulary for the two sides of a sequence-to-sequence task.

An encoder-decoder reads a source (a word, a first couplet) and writes a target (its phones,
the second couplet). Both sides share one id space, so a model with shared source/target/output
embeddings (the paper's choice) needs no mapping; three specials come first:

    id 0  <pad>   fills rows of a batch past their end (masked keys, ignored targets)
    id 1  </s>    ends every target: the decoder learns to stop by predicting it
    id 2  <s>     starts every decoder input (the "decoder start" token)
    id 3...       the symbols, sorted: source characters and target tokens, each once

The source is always split into characters. The target is split into characters
(target_split="char": Tang couplets) or on spaces (target_split="space": ARPAbet phones such as
"HH AH L OW", where each phone is one token).

    tok = PairTokenizer.from_pairs(["hi"], ["HH AY"], target_split="space")
    tok.encode("hi")                 # source ids, one per character
    tok.encode_target("HH AY")       # target ids, one per phone
    tok.decode(tok.encode_target("HH AY"))   # "HH AY"

There is no unknown-symbol id: a symbol outside the vocabulary is an error naming it.
Saved as one JSON file, `tokenizer.json`: {"type": "pairs", "symbols": [...],
"target_split": "char" | "space"}.
"""
from __future__ import annotations

from typing import Iterable

from glassformer.errors import GlassformerError, check_choice
from glassformer.tokenizers.base import AllowedSpecial, LayoutTokenizer, check_ids
from glassformer.tokenizers.char import describe_char

LAYOUT_TYPE = "pairs"             # the "type" field of a pair tokenizer.json
SPECIALS = ("<pad>", "</s>", "<s>")
PAD_ID, EOS_ID, BOS_ID = 0, 1, 2  # the ids of SPECIALS, in that order
TARGET_SPLITS = ("char", "space")


def split_target(text: str, target_split: str) -> list[str]:
    """The target's tokens: its characters, or its space-separated pieces."""
    if target_split == "char":
        return list(text)
    return text.split()


class PairTokenizer(LayoutTokenizer):
    """Source characters and target tokens in one vocabulary after <pad>, </s>, <s>."""

    KIND, LAYOUT_TYPE, VOCAB = "pair", LAYOUT_TYPE, "symbols"

    def __init__(self, symbols: Iterable[str], target_split: str = "char"):
        check_choice("target_split", target_split, TARGET_SPLITS)
        self.symbols = list(symbols)
        if len(set(self.symbols)) != len(self.symbols) or set(self.symbols) & set(SPECIALS):
            raise GlassformerError("pair vocabulary has a repeated symbol or a special token")
        self.target_split = target_split
        self.id_to_text = list(SPECIALS) + self.symbols
        self.symbol_to_id = {symbol: index for index, symbol in enumerate(self.id_to_text)}

    @classmethod
    def from_pairs(cls, sources: Iterable[str], targets: Iterable[str],
                   target_split: str = "char") -> "PairTokenizer":
        """The vocabulary of every source character and target token, sorted."""
        symbols = set()
        for source in sources:
            symbols.update(source)
        for target in targets:
            symbols.update(split_target(target, target_split))
        if not symbols:
            raise GlassformerError("cannot build a pair tokenizer from empty pairs")
        return cls(sorted(symbols), target_split)

    @property
    def vocab_size(self) -> int:
        return len(self.id_to_text)

    @property
    def special_tokens(self) -> dict[str, int]:
        return {token: index for index, token in enumerate(SPECIALS)}

    def _ids(self, pieces: list[str], what: str) -> list[int]:
        try:
            return [self.symbol_to_id[piece] for piece in pieces]
        except KeyError:
            position = next(i for i, p in enumerate(pieces) if p not in self.symbol_to_id)
            piece = pieces[position]
            shown = describe_char(piece) if len(piece) == 1 else repr(piece)
            raise GlassformerError(f"{what} {shown} at position {position} is not in the "
                                   f"vocabulary of {len(self.symbols)} symbols") from None

    def encode(self, text: str, allowed_special: AllowedSpecial = ()) -> list[int]:
        """A source: one id per character (specials are never spelled by text)."""
        return self._ids(list(text), "character")

    def encode_target(self, text: str) -> list[int]:
        """A target: one id per character or per space-separated token (no </s> added)."""
        return self._ids(split_target(text, self.target_split), "target token")

    def decode(self, ids: Iterable[int]) -> str:
        """Target ids -> text: tokens joined as the target was split (specials by name)."""
        pieces = [self.id_to_text[i] for i in check_ids(ids, self.vocab_size)]
        return " ".join(pieces) if self.target_split == "space" else "".join(pieces)

    def id_to_piece(self, token_id: int) -> str:
        return self.id_to_text[check_ids([token_id], self.vocab_size)[0]]

    def fields(self) -> dict:
        return {"symbols": self.symbols, "target_split": self.target_split}

    @classmethod
    def from_fields(cls, layout: dict) -> "PairTokenizer":
        return cls(layout["symbols"], layout.get("target_split", "char"))
