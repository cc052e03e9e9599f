"""The `glassformer attention` walkthrough: run the trace, then render it as prose or JSON."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from glassformer.explain.render import format_array, heatmap, to_jsonable
from glassformer.explain.text import TITLES, step_text
from glassformer.explain.trace import (Step, finite_difference_check, trace_attention_backward,
                                       trace_attention_forward)


class Walkthrough(NamedTuple):
    causal: bool
    forward: list[Step]
    backward: list[Step] | None        # None unless the backward pass was asked for
    check: dict[str, float] | None     # rel. error per input vs finite differences


def run_walkthrough(inputs: dict[str, np.ndarray], *, causal: bool,
                    dout: np.ndarray | None = None) -> Walkthrough:
    """Forward always; backward and its finite-difference check when `dout` (= G) is given."""
    trace = trace_attention_forward(inputs, causal=causal)
    if dout is None:
        return Walkthrough(causal, trace.steps, None, None)
    backward = trace_attention_backward(trace, dout)
    check = finite_difference_check(inputs, dout, causal=causal)
    return Walkthrough(causal, trace.steps, backward, check)


def upstream_gradient(kind: str, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
    """G for L = sum(output * G): all ones, or standard normal from `rng`."""
    if kind == "ones":
        return np.ones(shape, dtype=np.float32)
    return rng.standard_normal(shape).astype(np.float32)


def _render_steps(steps: list[Step], lang: str, causal: bool, start: int) -> list[str]:
    lines = []
    for number, step in enumerate(steps, start=start):
        lines.append(f"[{number}] {step.key}    {step.algebra}")
        lines.append("    " + step_text(step.key, lang, causal=causal))
        value = step.value
        if np.ndim(value) == 3:  # (B, ., .): one block per batch item
            for b, item in enumerate(value):
                if len(value) > 1:
                    lines.append(f"    {TITLES[lang]['batch']} {b}:")
                lines.append(format_array(item))
        else:
            lines.append(format_array(value))
        if step.key == "weights" and np.ndim(value) == 3:
            lines.append(heatmap(value[0]))
        lines.append("")
    return lines


def render_text(walk: Walkthrough, lang: str) -> str:
    """The walkthrough as numbered steps with explanations, in `lang` ("en" or "zh")."""
    titles = TITLES[lang]
    mode = titles["causal"] if walk.causal else titles["bidirectional"]
    lines = [f"== {titles['forward']}: {mode} ==", ""]
    lines += _render_steps(walk.forward, lang, walk.causal, start=1)
    if walk.backward is not None:
        lines += [f"== {titles['backward']} ==", ""]
        lines += _render_steps(walk.backward, lang, walk.causal, start=len(walk.forward) + 1)
        worst = max(walk.check.values())
        per_input = ", ".join(f"d{name} {err:.1e}" for name, err in walk.check.items())
        lines.append(f"{titles['check']} {worst:.1e}  ({per_input})")
    return "\n".join(lines).rstrip() + "\n"


def to_json(walk: Walkthrough) -> dict:
    """Every array under its stable key as nested lists (masked -inf written as -1e9)."""
    result = {step.key: to_jsonable(step.value) for step in walk.forward}
    if walk.backward is not None:
        result.update({step.key: to_jsonable(step.value) for step in walk.backward})
        result["max_rel_err"] = max(walk.check.values())
    result["causal"] = walk.causal
    return result


def render_compare(causal: Walkthrough, bidirectional: Walkthrough, lang: str) -> str:
    """Causal and bidirectional weights side by side, and what changed between them."""
    titles, text = TITLES[lang], None
    w_causal = next(s.value for s in causal.forward if s.key == "weights")[0]
    w_bidir = next(s.value for s in bidirectional.forward if s.key == "weights")[0]
    changed = [int(i) for i in np.flatnonzero(np.any(w_causal != w_bidir, axis=-1))]
    text = [f"== {titles['compare']} ==", "",
            f"{titles['causal']}:", format_array(w_causal), heatmap(w_causal), "",
            f"{titles['bidirectional']}:", format_array(w_bidir), heatmap(w_bidir), "",
            f"{step_text('compare_rows', lang)}: {changed}",
            step_text("compare_upper", lang)]
    if len(w_causal) - 1 not in changed:
        text.append(step_text("compare_last", lang))
    return "\n".join(text) + "\n"
