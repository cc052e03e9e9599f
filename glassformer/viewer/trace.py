"""`trace(part, **options) -> Trace`: one explain part run in a notebook, shown inline.

    trace = glassformer.trace("layer_norm", grad="ones")
    trace                      # Jupyter draws its steps: algebra, text, every array, the check
    trace["weights"]           # a step's value (forward steps first, then backward)
    trace.check.max_rel_err    # the finite-difference check of the gradients shown

(named `trace`, since `glassformer.explain` is the explain package.) The steps, numbers and words
are explain's own (explain/parts/); the page is the seed page's
(static/seed.js) with one column, so the check shown is exactly the check run.
"""
from __future__ import annotations

from typing import NamedTuple

from glassformer.display import InlineView, framed, resolve_lang
from glassformer.explain.core import LANGS, Result
from glassformer.explain.parts import explain_part
from glassformer.explain.render import check_line, render_text
from glassformer.viewer.page import render_page
from glassformer.viewer.seed_page import SEED_SCRIPTS, mode_data


class Trace(NamedTuple):
    """A part's run (explain/core.py's Result) with the ways a notebook shows it."""
    result: Result

    @property
    def forward(self):
        return self.result.forward

    @property
    def backward(self):
        return self.result.backward

    @property
    def check(self):
        return self.result.check

    def __getitem__(self, key):
        """The value of the step named `key` (forward steps first, then backward)."""
        if isinstance(key, int):
            return tuple.__getitem__(self, key)
        for step in self.result.forward + (self.result.backward or []):
            if step.key == key:
                return step.value
        raise KeyError(f"no step {key!r}; steps: {', '.join(self.keys())}")

    def keys(self) -> list[str]:
        return [step.key for step in self.result.forward + (self.result.backward or [])]

    def text(self, lang: str | None = None) -> str:
        """The trace as `glassformer explain` prints it."""
        return render_text(self.result, resolve_lang(lang))

    def view(self, *, lang: str | None = None) -> InlineView:
        """The steps as a page inline: tables, the weights as a heatmap, the check line."""
        lang = resolve_lang(lang)
        data = trace_page_data(self.result)
        page = render_page(data, title=data["title"][lang], lang=lang, scripts=SEED_SCRIPTS)
        return InlineView(framed(page, data["title"][lang]), self.text(lang))

    def _repr_html_(self) -> str:
        return self.view()._repr_html_()

    def __repr__(self) -> str:
        return self.text()


def trace_page_data(result: Result) -> dict:
    """The seed page's JSON with one column: the part's steps, the check line as its subtitle."""
    part = result.part
    check = {lang: "" for lang in LANGS}
    if result.backward is not None:
        check = {lang: check_line(result.check, lang, verdict=part.verdict) for lang in LANGS}
    title = {lang: part.text[lang]["title"] for lang in LANGS}
    return {"kind": "trace", "title": title, "compare": check,
            "modes": {part.name: mode_data(result, title)}}


def trace(part: str, *, seed: int = 0, grad: str | None = "ones", **options) -> Trace:
    """Run explain part `part` (`glassformer explain --help` lists them) with its options
    (seq=3, d_model=4, heads=2, ...); grad "ones" or "random" adds the backward pass and the
    finite-difference check, None shows the forward only."""
    return Trace(explain_part(part, options, seed=seed, grad=grad))
