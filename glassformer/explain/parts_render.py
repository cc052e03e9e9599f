"""Render a part's trace as numbered prose steps (in "en" or "zh") or as JSON under stable keys.

Step display, chosen by the part (PartStep.show):

    full    the whole array, one block per batch item for (B, ., .) arrays
    line    one line: the first few values, then mean and std (blocks and models)
    heads   per-head matrices of batch item 0, each with its ASCII heatmap (attention weights)
    tokens  the token pieces of a prompt
    top     the next-token table: rank, id, text, probability
"""
from __future__ import annotations

import numpy as np

from glassformer.explain.parts_core import FDCheck, PartResult, PartStep
from glassformer.explain.parts_text import TITLES, step_text
from glassformer.explain.render import PRECISION, format_array, heatmap, to_jsonable

# How many leading values a one-line step prints.
LINE_VALUES = 6


def _line(value, lang: str) -> str:
    arr = np.asarray(value, dtype=np.float64)
    mean, std = TITLES[lang]["mean"], TITLES[lang]["std"]
    first = ", ".join(f"{v:.{PRECISION}f}" for v in arr.ravel()[:LINE_VALUES])
    more = ", ..." if arr.size > LINE_VALUES else ""
    return (f"    [{first}{more}]  {mean} {arr.mean():.{PRECISION}f}  "
            f"{std} {arr.std():.{PRECISION}f}")


def _full(value, lang: str) -> list[str]:
    if isinstance(value, (int, np.integer)):
        return [f"    {value}"]
    if np.ndim(value) not in (3, 4):
        return [format_array(value)]
    lines = []
    for b, item in enumerate(value):           # (B, ...): one block per batch item
        if len(value) > 1:
            lines.append(f"    {TITLES[lang]['batch']} {b}:")
        if np.ndim(item) == 2:
            lines.append(format_array(item))
            continue
        for h, head in enumerate(item):        # (B, H, ., .): one block per head
            lines.append(f"    {TITLES[lang]['head']} {h}:")
            lines.append(format_array(head))
    return lines


def _heads(value, lang: str) -> list[str]:
    """(B, H, T, S) weights: batch item 0, each head as numbers and as a heatmap."""
    lines = []
    for h, weights in enumerate(np.asarray(value)[0]):
        lines.append(f"    {TITLES[lang]['head']} {h}:")
        lines.append(format_array(weights))
        lines.append(heatmap(weights))
    return lines


def _top(rows: list[dict], lang: str) -> list[str]:
    header = TITLES[lang]["top_header"]
    lines = [f"    {header}"]
    for rank, row in enumerate(rows, start=1):
        token = repr(row["token"])
        lines.append(f"    {rank}.  {row['id']:>6}  {token:<14}  {row['prob']:.{PRECISION}f}")
    return lines


def _value_lines(step: PartStep, lang: str) -> list[str]:
    if step.show == "line":
        return [_line(step.value, lang)]
    if step.show == "heads":
        return _heads(step.value, lang)
    if step.show == "tokens":
        return ["    " + " ".join(step.value)]
    if step.show == "top":
        return _top(step.value, lang)
    return _full(step.value, lang)


def _render_steps(steps: list[PartStep], part: str, lang: str, start: int) -> list[str]:
    lines = []
    for number, step in enumerate(steps, start=start):
        algebra = step.algebra.splitlines() or [""]
        lines.append(f"[{number}] {step.key}    {algebra[0]}")
        lines += ["        " + extra for extra in algebra[1:]]
        lines.append("    " + step_text(part, step.text, lang, step.fmt))
        lines += _value_lines(step, lang)
        lines.append("")
    return lines


def _check_line(check: FDCheck | None, lang: str) -> str:
    titles = TITLES[lang]
    if check is None:
        return titles["check_skipped"]
    parts = [f"d{name} {err:.1e}" for name, err in check.rel_err.items()]
    parts += [f"d{name} = 0, |numeric| {err:.1e}" for name, err in check.zero_err.items()]
    verdict = titles["check_ok"] if check.ok else titles["check_bad"]
    return f"{titles['check']} {check.max_rel_err:.1e}  {verdict}  ({', '.join(parts)})"


def render_text(result: PartResult, lang: str) -> str:
    """The part as numbered steps with explanations, then (if run) the backward and the check."""
    titles = TITLES[lang]
    part_title = step_text(result.part, "title", lang, None)
    lines = [f"== {part_title}: {titles['forward']} ==", ""]
    lines += _render_steps(result.forward, result.part, lang, start=1)
    if result.backward is not None:
        lines += [f"== {part_title}: {titles['backward']} ==", ""]
        lines += _render_steps(result.backward, result.part, lang,
                               start=len(result.forward) + 1)
        lines.append(_check_line(result.check, lang))
    return "\n".join(line.rstrip() for line in lines).rstrip() + "\n"


def _jsonable(value):
    if isinstance(value, list) and (not value or isinstance(value[0], (str, dict))):
        return value                  # token pieces and the top-k table are JSON already
    return to_jsonable(value)


def to_json(result: PartResult) -> dict:
    """{"part", "options", "forward": {key: array}, "backward": {...}, "check": {...}}.

    Arrays are nested lists; "check" holds "max_rel_err", "rel_err" and "zero_err" per input
    and "ok"; "backward" and "check" are null when not run (the check also for a loaded model).
    """
    payload = {"part": result.part, "options": result.options,
               "forward": {step.key: _jsonable(step.value) for step in result.forward},
               "backward": None, "check": None}
    if result.backward is not None:
        payload["backward"] = {step.key: _jsonable(step.value) for step in result.backward}
    if result.check is not None:
        payload["check"] = {"max_rel_err": result.check.max_rel_err,
                            "rel_err": result.check.rel_err, "zero_err": result.check.zero_err,
                            "ok": result.check.ok}
    return payload
