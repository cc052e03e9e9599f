"""`tokenize(tokenizer, text) -> Tokenization`: a text's tokens, shown inline in a notebook.

    glassformer.tokenize(tok, "水很清")
    # Tokenization(3 tokens: ⟨E6 B0⟩ ⟨B4⟩ 很 ...)    and in Jupyter, one box per character:
    #   [⟨E6 B0⟩ ⟨B4⟩] [很] [清]    a box holding several tokens is one character cut into bytes

The tokens and groups are the viewer's (viewer/tokens.py): a byte-level BPE token that is not
whole characters shows its bytes in hex instead of U+FFFD, and hovering a token shows its id and
bytes. Static HTML with inline styles: no script, nothing shared with other outputs.
"""
from __future__ import annotations

import html
from typing import NamedTuple

from glassformer.display import InlineView, boxed, resolve_lang
from glassformer.viewer.tokens import Group, Token, describe_tokens, token_groups

TEXT = {
    "en": {"tokens": "{n} tokens, {c} characters", "id": "id", "bytes": "bytes",
           "note": "a box is one character (or word); several tokens in one box: its bytes were "
                   "cut between tokens"},
    "zh": {"tokens": "{n} 个词元，{c} 个字符", "id": "编号", "bytes": "字节",
           "note": "每个方框是一个字（或词）；框里有多个词元，说明它的字节被切在了几个词元之间"},
}
BOX = ("display:inline-flex;gap:2px;border:1px solid #d9dde5;border-radius:4px;padding:1px;"
       "margin:1px;background:#f3f5f9")
CHIP = "white-space:pre;padding:1px 4px;border-radius:3px;font-family:ui-monospace,monospace"
SHADES = ("#dbe7fb", "#fbe3d3", "#dcf2e0", "#efe0f7")  # neighbouring tokens alternate


class Tokenization(NamedTuple):
    """A text, its ids, one Token per id and the groups that join back to the text."""
    text: str
    ids: list[int]
    tokens: list[Token]
    groups: list[Group]

    def view(self, *, lang: str | None = None) -> InlineView:
        """The tokens as coloured chips, one box per character; hover for id and bytes."""
        words = TEXT[resolve_lang(lang)]
        boxes = []
        for group in self.groups:
            chips = [_chip(self.tokens[p], p, words) for p in group.tokens]
            boxes.append(f'<span style="{BOX}" title="{html.escape(repr(group.text))}">'
                         f'{"".join(chips)}</span>')
        head = words["tokens"].format(n=len(self.ids), c=len(self.text))
        body = (f'<div style="color:#6b7280">{html.escape(head)} · {html.escape(words["note"])}'
                f'</div><div data-tokens="{len(self.ids)}">{"".join(boxes)}</div>')
        return InlineView(boxed(body), repr(self))

    def _repr_html_(self) -> str:
        return self.view()._repr_html_()

    def __repr__(self) -> str:
        shown = " ".join(tok.text for tok in self.tokens[:12])
        more = " ..." if len(self.tokens) > 12 else ""
        return f"Tokenization({len(self.ids)} tokens: {shown}{more}; ids {self.ids[:12]}{more})"


def _chip(token: Token, position: int, words: dict) -> str:
    hover = f"{words['id']} {token.id}" + (f" · {words['bytes']} {token.hex}" if token.hex else "")
    colour = SHADES[position % len(SHADES)]
    style = CHIP + f";background:{colour}" + ("" if token.whole else ";color:#6b7280")
    return (f'<span class="gf-token" style="{style}" title="{html.escape(hover)}">'
            f'{html.escape(token.text)}</span>')


def tokenize(tokenizer, text: str) -> Tokenization:
    """Encode `text` with `tokenizer` (or a Model's tokenizer) and describe every token."""
    tokenizer = getattr(tokenizer, "tokenizer", tokenizer)
    ids = list(tokenizer.encode(text))
    return Tokenization(text, ids, describe_tokens(tokenizer, ids),
                        token_groups(tokenizer, ids, text))
