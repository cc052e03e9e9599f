"""Character tokenizer: one id per distinct character of a corpus (char-rnn, nanoGPT's shakespeare_char).

The vocabulary is the sorted set of characters in the training text, so Tiny Shakespeare gives 65
ids ('\\n' = 0, ' ' = 1, ...). Optional special tokens (say `<|endoftext|>`) take the ids after
the characters; text spells them only when the caller allows it (`allowed_special`, base.py).

    tok = CharTokenizer.from_text("hello")   # chars 'e' 'h' 'l' 'o' -> ids 0 1 2 3
    tok.encode("hole")                      # [1, 3, 2, 0]

There is no unknown-character id: a character outside the vocabulary is an error that names it and
its position, because silently dropping or replacing it would corrupt a training set.

Saved as one JSON file, `tokenizer.json`: {"type": "char", "chars": [...], "special_tokens": {...}}.
"""
from __future__ import annotations

import unicodedata
from typing import Iterable

from glassformer.errors import GlassformerError
from glassformer.tokenizers.base import (AllowedSpecial, LayoutTokenizer, allowed_specials,
                                         check_ids, split_on_specials)

LAYOUT_TYPE = "char"   # the "type" field that marks a glassformer char tokenizer.json


def describe_char(ch: str) -> str:
    """A character as a reader can see it, even when it is invisible: `'\\t' (U+0009 ...)`."""
    name = unicodedata.name(ch, "unnamed")
    return f"{ch!r} (U+{ord(ch):04X} {name})"


class CharTokenizer(LayoutTokenizer):
    """Maps each character of a fixed alphabet to its index in that alphabet."""

    KIND, LAYOUT_TYPE, VOCAB = "char", LAYOUT_TYPE, "chars"

    def __init__(self, chars: Iterable[str], special_tokens: Iterable[str] = ()):
        self.chars = list(chars)  # id -> character
        for ch in self.chars:
            if len(ch) != 1:
                raise GlassformerError(f"char vocabulary entries must be single characters, got {ch!r}")
        if len(set(self.chars)) != len(self.chars):
            raise GlassformerError("char vocabulary has a repeated character")
        self.char_to_id = {ch: index for index, ch in enumerate(self.chars)}
        # Special tokens come after the characters: ids len(chars), len(chars) + 1, ...
        self.specials = {token: len(self.chars) + k for k, token in enumerate(special_tokens)}
        self.id_to_text = self.chars + list(self.specials)

    @classmethod
    def from_text(cls, text: str, special_tokens: Iterable[str] = ()) -> "CharTokenizer":
        """The tokenizer whose vocabulary is every distinct character of `text`, sorted."""
        if not text:
            raise GlassformerError("cannot build a char tokenizer from empty text")
        return cls(sorted(set(text)), special_tokens)

    @property
    def vocab_size(self) -> int:
        return len(self.id_to_text)

    @property
    def special_tokens(self) -> dict[str, int]:
        return dict(self.specials)

    def encode(self, text: str, allowed_special: AllowedSpecial = ()) -> list[int]:
        """One id per character; the special tokens `allowed_special` names are matched whole
        first (by default none: `<|endoftext|>` in text is thirteen characters)."""
        allowed = allowed_specials(allowed_special, self.specials)
        ids: list[int] = []
        offset = 0  # where the current chunk starts in `text`, for error messages
        for chunk, is_special in split_on_specials(text, allowed):
            if is_special:
                ids.append(self.specials[chunk])
            else:
                ids.extend(self._encode_chars(chunk, offset))
            offset += len(chunk)
        return ids

    def _encode_chars(self, chunk: str, offset: int) -> list[int]:
        try:
            return [self.char_to_id[ch] for ch in chunk]
        except KeyError:
            # The fast path failed; find the first unknown character to report it precisely.
            position = next(i for i, ch in enumerate(chunk) if ch not in self.char_to_id)
            raise GlassformerError(
                f"character {describe_char(chunk[position])} at position {offset + position} "
                f"is not in the vocabulary of {len(self.chars)} characters") from None

    def decode(self, ids: Iterable[int]) -> str:
        return "".join(self.id_to_text[token_id] for token_id in check_ids(ids, self.vocab_size))

    def id_to_piece(self, token_id: int) -> str:
        return self.id_to_text[check_ids([token_id], self.vocab_size)[0]]

    def fields(self) -> dict:
        return {"chars": self.chars, "special_tokens": list(self.specials)}

    @classmethod
    def from_fields(cls, layout: dict) -> "CharTokenizer":
        return cls(layout["chars"], layout.get("special_tokens", []))
