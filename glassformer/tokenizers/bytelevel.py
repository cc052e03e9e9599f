"""GPT-2's byte <-> printable-character table, and a readable view of byte-level tokens.

Byte-level BPE works on the UTF-8 bytes of the text, so any string can be encoded and no id is
ever "unknown". Vocabulary files (vocab.json, merges.txt, GGUF) must still store each token as
text, so GPT-2 spells every byte as one printable character (Radford et al. 2019, `encoder.py`):

    bytes that are already printable and not space ('!'..'~', '¡'..'¬', '®'..'ÿ') -> themselves
    the other 68 bytes (controls, space, 0x7F..0xA0, 0xAD)   -> chr(256), chr(257), ... in order

So a space is 'Ġ' (U+0120), a newline 'Ċ', and '汉' (bytes e6 b1 89) is spelled 'æ±ī'. That spelling
is why byte-level vocabularies look like mojibake; `readable_pieces` undoes it for display.
"""
from __future__ import annotations

import codecs
from typing import NamedTuple


def bytes_to_unicode() -> dict[int, str]:
    """Byte value (0..255) -> the printable character GPT-2 uses to spell it in vocab files.

    >>> table = bytes_to_unicode()
    >>> table[ord("A")], table[ord(" ")], table[ord("\\n")]
    ('A', 'Ġ', 'Ċ')
    """
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
                 + list(range(ord("®"), ord("ÿ") + 1)))
    table = {byte: chr(byte) for byte in printable}
    shifted = 0
    for byte in range(256):
        if byte not in table:
            table[byte] = chr(256 + shifted)  # the next unused code point above Latin-1
            shifted += 1
    return dict(sorted(table.items()))


def unicode_to_bytes() -> dict[str, int]:
    """The inverse table: spelling character -> byte value."""
    return {ch: byte for byte, ch in bytes_to_unicode().items()}


def spell_bytes(data: bytes, table: dict[int, str]) -> str:
    """Bytes -> their vocab-file spelling (b' the' -> 'Ġthe'), using bytes_to_unicode()'s table."""
    return "".join(table[byte] for byte in data)


def unspell(spelling: str, inverse: dict[str, int]) -> bytes:
    """A vocab-file spelling -> its bytes ('Ġthe' -> b' the'); KeyError on a character outside it."""
    return bytes(inverse[ch] for ch in spelling)


class ReadablePiece(NamedTuple):
    """What one token shows: the text of its group of tokens, and its place in that group."""
    text: str    # the decoded characters (U+FFFD where the bytes never complete a character)
    part: int    # 1-based position of this token in its group
    parts: int   # tokens in the group; 1 when the token holds whole characters


def readable_pieces(pieces: list[bytes]) -> list[ReadablePiece]:
    """Each token's bytes as text a reader can see, one entry per token.

    A token that holds whole characters shows them. Tokens that each hold part of one character
    (a Chinese character is 3 bytes and often spans 2 tokens) are grouped until the bytes decode,
    and every token in the group shows the group's text and its place in it:

    >>> [f"{p.text} {p.part}/{p.parts}" for p in readable_pieces([b"a", b"\\xe6\\xb1", b"\\x89"])]
    ['a 1/1', '汉 1/2', '汉 2/2']
    """
    shown: list[ReadablePiece] = []
    group: list[bytes] = []
    for piece in pieces:
        group.append(piece)
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        decoder.decode(b"".join(group), final=False)
        # getstate()[0] holds the bytes of a character still waiting for its continuation bytes.
        if decoder.getstate()[0]:
            continue
        shown.extend(_label_group(group))
        group = []
    if group:
        shown.extend(_label_group(group))  # the text ended inside a character: shows U+FFFD
    return shown


def _label_group(group: list[bytes]) -> list[ReadablePiece]:
    text = b"".join(group).decode("utf-8", errors="replace")
    return [ReadablePiece(text, k + 1, len(group)) for k in range(len(group))]
