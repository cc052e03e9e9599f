"""The seed's §1.2 self-attention walkthrough as an interactive page (`glassformer attention
--html`): X, Q, K, V, scores, mask, weights, output and the backward pass, causal and
bidirectional side by side, English and Chinese.

Every number and every sentence comes from the explain part (explain/parts/attention.py): this
file only lays its steps out as JSON for static/seed.js. `walkthrough()` shows the page inline in
a notebook; an explain trace (viewer/trace.py) reuses its columns.
"""
from __future__ import annotations

from pathlib import Path

from glassformer.display import InlineView, framed, resolve_lang
from glassformer.explain.core import LANGS
from glassformer.explain.parts import explain_part
from glassformer.explain.parts.attention import TEXT
from glassformer.explain.render import headings, to_jsonable
from glassformer.viewer.page import render_page, write_page

SEED_SCRIPTS = ["common.js", "seed.js"]
MODES = ("causal", "bidirectional")


def _steps(steps) -> list[dict]:
    return [{"key": s.key, "algebra": s.algebra, "text": s.text, "value": to_jsonable(s.value)}
            for s in steps or []]


def mode_data(result, label: dict) -> dict:
    """One column of the page: a part's forward and backward steps, headed in both languages."""
    heads = {lang: headings(result, lang) for lang in LANGS}
    return {"forward": _steps(result.forward), "backward": _steps(result.backward),
            "heading": {lang: heads[lang][0] for lang in LANGS},
            "backward_heading": {lang: heads[lang][1] for lang in LANGS}, "label": label}


def seed_page_data(sizes: dict, *, seed: int = 0, grad: str = "ones") -> dict:
    """Both modes of the attention part, forward and backward, as JSON-ready dicts."""
    modes = {}
    for mode in MODES:
        result = explain_part("attention", {**sizes, "bidirectional": mode == "bidirectional"},
                              seed=seed, grad=grad)
        modes[mode] = mode_data(result, {lang: TEXT[lang][mode] for lang in LANGS})
    return {"kind": "seed", "title": {lang: TEXT[lang]["title"] for lang in LANGS},
            "compare": {lang: TEXT[lang]["compare"] for lang in LANGS}, "modes": modes}


def walkthrough(*, lang: str | None = None, seed: int = 0, grad: str = "ones") -> InlineView:
    """The seed's walkthrough inline in a notebook (the page `glassformer attention --html`
    writes): the seed's 3 tokens, causal beside bidirectional, forward and backward."""
    lang = resolve_lang(lang)
    data = seed_page_data({}, seed=seed, grad=grad)
    page = render_page(data, title=data["title"][lang], lang=lang, scripts=SEED_SCRIPTS)
    weights = next(s["value"] for s in data["modes"]["causal"]["forward"]
                   if s["key"] == "weights")[0]                           # (T, S)
    rows = "; ".join(" ".join(f"{w:.4f}" for w in row) for row in weights)
    return InlineView(framed(page, data["title"][lang]),
                      f"walkthrough: {data['title'][lang]} (causal weights {rows})")


def write_seed_page(path: str | Path, sizes: dict, *, lang: str, seed: int = 0,
                    grad: str = "ones") -> Path:
    """Write the walkthrough page to `path`; returns the path."""
    data = seed_page_data(sizes, seed=seed, grad=grad)
    return write_page(path, data, title=data["title"][lang], lang=lang, scripts=SEED_SCRIPTS)
