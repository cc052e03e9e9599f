"""Rich display in Jupyter: the HTML a result shows inline, and the language it speaks.

Jupyter, JupyterLab and VS Code draw an object with `_repr_html_` as HTML under the cell. The
results a learner gets back (`inspect`, `trace`, `walkthrough`, `tokenize`, `fill_mask`,
`translate`) return an `InlineView` from their `view(lang=...)`, and `_repr_html_` is that view
in the locale's language.

A page of the viewer (viewer/page.py: its data, CSS and JS all inline) is shown inside an
<iframe srcdoc="...">, so each output is its own document:

    notebook page
    ├─ <iframe id="gf-view-3f9a...">   the model page: its own window, #app, GF, ids
    ├─ <iframe id="gf-view-81c2...">   a second one: nothing shared with the first
    └─ <div id="gf-view-77de...">       static HTML (tokens, fill-mask): inline styles only

nothing in the outer page is named by the viewer's JS (no global clobbered, no id repeated),
and no URL appears anywhere: it draws offline, behind any firewall. The frame grows to fit its
page up to MAX_HEIGHT_PX, past which the page scrolls inside it (a ResizeObserver set up by the
frame's own onload).

The language follows `lang=` or, as the CLI does, the locale (LC_ALL, LC_MESSAGES, LANG,
LANGUAGE); every page can still switch language with its buttons.
"""
from __future__ import annotations

import html
import os
import uuid

from glassformer.errors import GlassformerError

LANGS = ("en", "zh")
# The frame's height before its page has loaded and measured itself, and the most it grows to
# (a longer page scrolls inside its frame, so a notebook stays readable around it).
START_HEIGHT_PX = 480
MAX_HEIGHT_PX = 900

# note: runs in the outer page on the frame's load event; reads only `this` (the frame).
FIT = ("var f=this,d=f.contentDocument;if(!d)return;function fit(){f.style.height=Math.min("
       f"d.documentElement.scrollHeight+2,{MAX_HEIGHT_PX})+'px'}}fit();"
       "new ResizeObserver(fit).observe(d.body)")

FRAME = ('<iframe id="{id}" class="glassformer-view" title="{title}" srcdoc="{doc}" '
         'style="width:100%;height:{height}px;border:1px solid #d9dde5;border-radius:6px" '
         'onload="{fit}"></iframe>')


def detect_lang(environ) -> str:
    """Chinese when the locale says so (LC_ALL, LC_MESSAGES, LANG, LANGUAGE), else English."""
    for var in ("LC_ALL", "LC_MESSAGES", "LANG", "LANGUAGE"):
        value = environ.get(var, "")
        if value:
            return "zh" if value.lower().startswith("zh") else "en"
    return "en"


def resolve_lang(lang: str | None) -> str:
    """`lang` when given ("en" or "zh"), else the locale's language."""
    if lang is None:
        return detect_lang(os.environ)
    if lang not in LANGS:
        raise GlassformerError(f"expected lang 'en' or 'zh', got {lang!r}")
    return lang


def view_id() -> str:
    """An element id no other output on the page has."""
    return "gf-view-" + uuid.uuid4().hex[:12]


def framed(page: str, title: str) -> str:
    """A whole HTML page as one <iframe srcdoc>: its own document, so its own ids and globals."""
    return FRAME.format(id=view_id(), title=html.escape(title), doc=html.escape(page, quote=True),
                        height=START_HEIGHT_PX, fit=html.escape(FIT, quote=True))


def boxed(body: str) -> str:
    """Static HTML (no script) in a <div> with an id of its own."""
    return (f'<div id="{view_id()}" class="glassformer-view" style="font:14px/1.45 system-ui,'
            f'sans-serif;color:#1d2330">{body}</div>')


class InlineView:
    """What a notebook cell shows: the HTML (`_repr_html_`) and a one-line text (`__repr__`)."""

    def __init__(self, markup: str, text: str):
        self.markup = markup
        self.text = text

    def _repr_html_(self) -> str:
        return self.markup

    def __repr__(self) -> str:
        return self.text
