"""The WordPiece training corpus: 2,000 lines of English, Chinese, digits and punctuation.

1,200 Tiny Shakespeare lines (every 30th), 600 Tang poem lines (every 80th), and 200 made lines of
numbers and punctuation (ASCII, CJK and typographic marks). Deterministic: no sampling.

    python tests/tokenizers/wordpiece_mixed_corpus.py OUT.txt    writes it, one line per line
"""
from __future__ import annotations

import sys
from pathlib import Path

PUNCTUATION = ["，。！？", "「」『』", "……——", "《》〈〉", "“”‘’", "¿¡", "«»", "§¶†", "(!?)", "[{<>}]",
               "--", "...", "~`^", "@#$%&*", "+=_|\\/", "；：、"]


def number_line(k: int) -> str:
    """A line of digits and punctuation, different for each k."""
    marks = PUNCTUATION[k % len(PUNCTUATION)]
    return (f"{k * 7919 % 100000} + {k * k} = {k * 7919 % 100000 + k * k}; ({k / 7:.3f}%) "
            f"{marks} No.{k:04d}, 第{k}首{marks[:2]} x{k % 13}y{k % 17}")


def build_mixed_corpus(shakespeare: str, tang_poems: str) -> list[str]:
    """The 2,000 lines of the module docstring."""
    english = shakespeare.split("\n")[::30][:1200]
    chinese = tang_poems.split("\n")[::80][:600]
    numbers = [number_line(k) for k in range(200)]
    return english + chinese + numbers


if __name__ == "__main__":
    data = Path(__file__).resolve().parents[2].parent / "shared" / "data"
    lines = build_mixed_corpus((data / "tinyshakespeare.txt").read_text(encoding="utf-8"),
                               (data / "tang_poems.txt").read_text(encoding="utf-8"))
    Path(sys.argv[1]).write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {len(lines)} lines to {sys.argv[1]}")
