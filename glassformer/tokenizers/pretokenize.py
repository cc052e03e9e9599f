"""Pre-tokenizers: the regex that cuts text into words before BPE merges run inside each word.

Merges never cross a pre-token boundary, so " dog." becomes " dog" + "." first and BPE only ever
sees those. The patterns are the published ones (matched with the `regex` package, which knows
Unicode classes like \\p{L} letters and \\p{N} numbers):

    gpt2    GPT-2 / tiktoken r50k: contractions, optional space + letters, optional space + digits,
            optional space + other symbols, trailing whitespace kept apart from the next word
    llama3  LLaMA-3 (= tiktoken cl100k): case-insensitive contractions, digits in groups of at most
            three, newlines grouped with preceding whitespace
    smollm  SmolLM / SmolLM2: every digit is cut out on its own first (HF `Digits(individual_digits)`),
            then the gpt2 pattern runs on the pieces between digits

subtle: `\\s+(?!\\S)` gives all but the last space of a run to the whitespace token, so the last
space can prefix the next word: "a   b" -> "a", "  ", " b".
"""
from __future__ import annotations

import regex

from glassformer.errors import GlassformerError

GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""

LLAMA3_PATTERN = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"""
                  r"""| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""")

# name -> (regex pattern, whether each digit is isolated before the pattern runs)
NAMED_PRETOKENIZERS = {
    "gpt2": (GPT2_PATTERN, False),
    "llama3": (LLAMA3_PATTERN, False),
    "smollm": (GPT2_PATTERN, True),
}

# A capturing group, so regex.split keeps each digit as its own item.
DIGIT_SPLIT = r"(\p{N})"


class PreTokenizer:
    """Cuts text into pre-tokens with one regex, optionally isolating every digit first."""

    def __init__(self, pattern: str, *, split_digits: bool = False, name: str | None = None):
        self.pattern = pattern
        self.split_digits = split_digits
        self.name = name  # a key of NAMED_PRETOKENIZERS, or None for a custom pattern
        try:
            self.compiled = regex.compile(pattern)
        except regex.error as err:
            raise GlassformerError(f"pre-tokenizer pattern does not compile: {err}") from None
        self.digit_split = regex.compile(DIGIT_SPLIT)

    @classmethod
    def named(cls, name: str) -> "PreTokenizer":
        """One of NAMED_PRETOKENIZERS: 'gpt2', 'llama3' or 'smollm'."""
        if name not in NAMED_PRETOKENIZERS:
            raise GlassformerError(f"unknown pre-tokenizer {name!r}; "
                                   f"known: {', '.join(NAMED_PRETOKENIZERS)}")
        pattern, split_digits = NAMED_PRETOKENIZERS[name]
        return cls(pattern, split_digits=split_digits, name=name)

    @classmethod
    def matching(cls, pattern: str, split_digits: bool) -> "PreTokenizer":
        """The named pre-tokenizer with this pattern and flag if there is one, else a custom one."""
        for name, spec in NAMED_PRETOKENIZERS.items():
            if spec == (pattern, split_digits):
                return cls.named(name)
        return cls(pattern, split_digits=split_digits)

    def split(self, text: str) -> list[str]:
        """Pre-tokens of `text`; joined together they give `text` back exactly.

        >>> PreTokenizer.named("gpt2").split("I'm  here 42")
        ['I', "'m", ' ', ' here', ' 42']
        >>> PreTokenizer.named("smollm").split("x 42")
        ['x', ' ', '4', '2']
        """
        if not self.split_digits:
            return self.compiled.findall(text)
        words: list[str] = []
        for index, part in enumerate(self.digit_split.split(text)):
            if index % 2 == 1:
                words.append(part)  # odd items are the isolated digits
            elif part:
                words.extend(self.compiled.findall(part))
        return words
