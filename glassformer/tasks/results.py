"""What `fill_mask` and `translate` return, able to show themselves in a notebook.

    FillMaskResult   a list (one list of (token, probability) per [MASK], best first), as before,
                     plus the text it answered; Jupyter draws a bar per guess
    Translation      a str (the model's output), plus the source it translated; Jupyter draws
                     source -> output

Both are their plain type (`==` a list or a str, JSON-serialisable): code that used the plain
values keeps working. Static HTML with inline styles (glassformer/display.py's `boxed`): no
script. Cross-attention is `glassformer.inspect(model, source)`'s page.
"""
from __future__ import annotations

import html

from glassformer.display import InlineView, boxed, resolve_lang

TEXT = {
    "en": {"mask": "[MASK] {n}", "source": "source", "output": "output"},
    "zh": {"mask": "第 {n} 个 [MASK]", "source": "原文", "output": "输出"},
}
BAR_PX = 160  # the width of a probability of 1
CELL = "padding:2px 8px;border-bottom:1px solid #eef0f4;white-space:pre"


class FillMaskResult(list):
    """list[list[tuple[str, float]]]: the guesses at each [MASK]; `.text` is the question."""

    def __init__(self, guesses, text: str):
        super().__init__(guesses)
        self.text = text

    def view(self, *, lang: str | None = None) -> InlineView:
        words = TEXT[resolve_lang(lang)]
        rows = [f'<div style="margin-bottom:4px">{html.escape(self.text)}</div>']
        for n, guesses in enumerate(self, start=1):
            cells = "".join(_guess(token, prob) for token, prob in guesses)
            rows.append(f'<div class="gf-mask" style="margin:4px 0"><b>'
                        f'{html.escape(words["mask"].format(n=n))}</b>'
                        f'<table style="border-collapse:collapse">{cells}</table></div>')
        return InlineView(boxed("".join(rows)), list.__repr__(self))

    def _repr_html_(self) -> str:
        return self.view()._repr_html_()


def _guess(token: str, prob: float) -> str:
    bar = f'<div style="background:#2f5fb3;height:10px;width:{round(prob * BAR_PX)}px"></div>'
    return (f'<tr><td style="{CELL}">{html.escape(token)}</td>'
            f'<td style="{CELL}">{prob:.4f}</td><td style="{CELL}">{bar}</td></tr>')


class Translation(str):
    """The model's output text; `.source` is what it translated."""

    def __new__(cls, output: str, source: str):
        text = super().__new__(cls, output)
        text.source = source
        return text

    def view(self, *, lang: str | None = None) -> InlineView:
        words = TEXT[resolve_lang(lang)]
        body = (f'<table class="gf-translation" style="border-collapse:collapse"><tr>'
                f'<td style="{CELL};color:#6b7280">{words["source"]}</td>'
                f'<td style="{CELL}">{html.escape(self.source)}</td></tr><tr>'
                f'<td style="{CELL};color:#6b7280">{words["output"]}</td>'
                f'<td style="{CELL}"><b>{html.escape(str(self))}</b></td></tr></table>')
        return InlineView(boxed(body), str.__repr__(self))

    def _repr_html_(self) -> str:
        return self.view()._repr_html_()
