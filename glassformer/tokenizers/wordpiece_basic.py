"""BERT's basic tokenizer: clean, lower-case, strip accents, split on spaces, punctuation and CJK.

Runs before WordPiece and decides what a "word" is (Devlin et al. 2019, `tokenization.py`):

    normalize  1. clean: drop NUL, U+FFFD and control/format characters; any whitespace -> ' '
               2. put spaces around every CJK ideograph, so each becomes its own word
               3. strip accents: NFD-decompose, drop nonspacing marks ('é' -> 'e' + '\u0301' -> 'e')
               4. lower-case, character by character
    split      on whitespace (dropped) and around each punctuation character (kept, alone)

    "Héllo, 世界!" -> "hello" "," "世" "界" "!"

Reference matched: HF `tokenizers` BertNormalizer + BertPreTokenizer (what BertTokenizerFast runs),
including its order (accents are stripped before lower-casing) and per-character lower-casing
(so a final 'Σ' becomes 'σ', not 'ς' as Python's str.lower would give).

Known deviation: categories come from Python's `unicodedata` (Unicode 14 on Python 3.11), while
HF's Rust tables are older (about Unicode 9). About 560 of the 1.1M code points, all assigned
after that (rare scripts, some new punctuation such as U+2E43..U+2E5D), are treated differently.
"""
from __future__ import annotations

import unicodedata

# Unicode's White_Space property (what Rust's char::is_whitespace tests).
# note: Python's str.isspace() also accepts U+001C..U+001F, which BERT treats as control characters.
WHITESPACE = frozenset("\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005"
                       "\u2006\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000")

# The CJK Unified Ideographs blocks BERT isolates (not Hangul, Hiragana or Katakana).
# subtle: HF's Rust code starts Extension E at 0x2B920, not 0x2B820 as Google's BERT does; we
# follow HF (the reference we match), so U+2B820..U+2B91F stay inside words.
CJK_RANGES = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
              (0x2B740, 0x2B81F), (0x2B920, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F))


def is_control(ch: str) -> bool:
    """Control, format, private-use or surrogate (Cc, Cf, Co, Cs), except tab, newline, return.

    note: unassigned code points (Cn) are kept, as HF does; they become [UNK] later.
    """
    return ch not in "\t\n\r" and unicodedata.category(ch) in ("Cc", "Cf", "Co", "Cs")


def is_punctuation(ch: str) -> bool:
    """ASCII punctuation and symbols (so '$', '+', '^', '`' count), or any Unicode P* category."""
    code = ord(ch)
    if 33 <= code <= 47 or 58 <= code <= 64 or 91 <= code <= 96 or 123 <= code <= 126:
        return True
    return unicodedata.category(ch).startswith("P")


def is_cjk(ch: str) -> bool:
    code = ord(ch)
    return any(low <= code <= high for low, high in CJK_RANGES)


def normalize(text: str, *, clean_text: bool = True, split_chinese: bool = True,
              strip_accents: bool | None = None, lowercase: bool = True) -> str:
    """BertNormalizer: steps 1-4 of the module docstring, each switchable.

    strip_accents=None follows `lowercase`, as in BERT: uncased models strip, cased ones keep.
    """
    if strip_accents is None:
        strip_accents = lowercase
    if clean_text:
        text = "".join(" " if ch in WHITESPACE else ch for ch in text
                       if ch not in "\x00\ufffd" and not is_control(ch))
    if split_chinese:
        text = "".join(f" {ch} " if is_cjk(ch) else ch for ch in text)
    if strip_accents:
        text = "".join(ch for ch in unicodedata.normalize("NFD", text)
                       if unicodedata.category(ch) != "Mn")
    if lowercase:
        text = "".join(ch.lower() for ch in text)  # per character, as HF does (see docstring)
    return text


def split_words(text: str) -> list[str]:
    """BertPreTokenizer: split on whitespace (dropped) and isolate each punctuation character.

    >>> split_words("don't stop!")
    ['don', "'", 't', 'stop', '!']
    """
    words: list[str] = []
    current: list[str] = []
    for ch in text:
        if ch in WHITESPACE or is_punctuation(ch):
            if current:
                words.append("".join(current))
                current = []
            if ch not in WHITESPACE:
                words.append(ch)
        else:
            current.append(ch)
    if current:
        words.append("".join(current))
    return words


def basic_tokenize(text: str, *, clean_text: bool = True, split_chinese: bool = True,
                   strip_accents: bool | None = None, lowercase: bool = True) -> list[str]:
    """normalize then split_words: the words WordPiece will cut into subwords.

    >>> basic_tokenize("Héllo, 世界!")
    ['hello', ',', '世', '界', '!']
    """
    return split_words(normalize(text, clean_text=clean_text, split_chinese=split_chinese,
                                 strip_accents=strip_accents, lowercase=lowercase))
