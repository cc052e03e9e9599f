"""The seed's §1.2 self-attention walkthrough as an interactive page (`glassformer attention
--html`): X, Q, K, V, scores, mask, weights, output and the backward pass, causal and
bidirectional side by side, English and Chinese.

Every number and every sentence comes from the explain part (explain/parts/attention.py): this
file only lays its steps out as JSON for static/seed.js.
"""
from __future__ import annotations

from pathlib import Path

from glassformer.explain.core import LANGS
from glassformer.explain.parts import explain_part
from glassformer.explain.parts.attention import TEXT
from glassformer.explain.render import to_jsonable
from glassformer.viewer.page import write_page

SEED_SCRIPTS = ["common.js", "seed.js"]
MODES = ("causal", "bidirectional")


def _steps(steps) -> list[dict]:
    return [{"key": s.key, "algebra": s.algebra, "text": s.text, "value": to_jsonable(s.value)}
            for s in steps]


def seed_page_data(sizes: dict, *, seed: int = 0, grad: str = "ones") -> dict:
    """Both modes of the attention part, forward and backward, as JSON-ready dicts."""
    modes = {}
    for mode in MODES:
        result = explain_part("attention", {**sizes, "bidirectional": mode == "bidirectional"},
                              seed=seed, grad=grad)
        headings = {lang: result.part.headings(result.options, lang) for lang in LANGS}
        modes[mode] = {"forward": _steps(result.forward), "backward": _steps(result.backward),
                       "heading": {lang: headings[lang][0] for lang in LANGS},
                       "backward_heading": {lang: headings[lang][1] for lang in LANGS},
                       "label": {lang: TEXT[lang][mode] for lang in LANGS}}
    return {"kind": "seed", "title": {lang: TEXT[lang]["title"] for lang in LANGS},
            "compare": {lang: TEXT[lang]["compare"] for lang in LANGS}, "modes": modes}


def write_seed_page(path: str | Path, sizes: dict, *, lang: str, seed: int = 0,
                    grad: str = "ones") -> Path:
    """Write the walkthrough page to `path`; returns the path."""
    data = seed_page_data(sizes, seed=seed, grad=grad)
    return write_page(path, data, title=data["title"][lang], lang=lang, scripts=SEED_SCRIPTS)
