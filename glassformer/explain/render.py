"""Render a part's `Result` as numbered prose steps (in "en" or "zh") or as JSON under stable keys.

Arrays print with 4 decimals (what the seed tutorial prints). How a step's value is shown is the
part's choice (Step.show):

    full     the whole array; one block per batch item for (B, ., .), per head for (B, H, ., .)
    heatmap  as full, then an ASCII heatmap of batch item 0 (the seed's attention weights)
    line     one line: the first few values, then mean and std (blocks and models)
    heads    per-head matrices of batch item 0, each with its ASCII heatmap (attention weights)
    tokens   the token pieces of a prompt
    top      the next-token table: rank, id, text, probability
    lines    a list of strings, one indented line each (a prompt, a table written as text)
"""
from __future__ import annotations

import math

import numpy as np

from glassformer.explain.core import Check, Result, Step

# Printed precision: 4 decimals is what the seed tutorial prints, so the numbers line up.
PRECISION = 4
# Light to dark; a weight of 0 is blank, 1 is the darkest.
SHADES = " .:-=+*#%@"
# JSON has no -inf: a masked score is written as the seed's fill value.
JSON_NEG_INF = -1e9
# How many leading values a one-line step prints.
LINE_VALUES = 6

LABELS = {
    "en": {
        "forward": "forward pass",
        "backward": "backward pass for L = sum(out * G)",
        "batch": "batch",
        "head": "head",
        "check": "finite-difference check (float64): max rel. error",
        "check_ok": "OK",
        "check_bad": "MISMATCH",
        "check_skipped": "finite-difference check skipped: a loaded model has too many weights "
                         "to nudge one at a time (run without --ckpt for a checked tiny model).",
        "top_header": "rank     id  text            probability",
        "mean": "mean",
        "std": "std",
    },
    "zh": {
        "forward": "前向传播",
        "backward": "反向传播：损失 L = sum(out * G)",
        "batch": "批次",
        "head": "头",
        "check": "有限差分校验（float64）：最大相对误差",
        "check_ok": "通过",
        "check_bad": "不一致",
        "check_skipped": "跳过有限差分校验：加载的模型权重太多，无法逐个扰动"
                         "（去掉 --ckpt，可在经过校验的小模型上运行）。",
        "top_header": "名次     id  文本            概率",
        "mean": "均值",
        "std": "标准差",
    },
}


def format_array(a, precision: int = PRECISION, indent: str = "    ") -> str:
    """Matrix text with `precision` decimals, each line indented."""
    if np.ndim(a) == 0:
        return indent + f"{float(a):.{precision}f}"
    arr = np.asarray(a)
    if arr.dtype == np.bool_:
        arr = arr.astype(int)
    text = np.array2string(arr, precision=precision, suppress_small=True, max_line_width=120)
    return "\n".join(indent + line for line in text.splitlines())


def heatmap(weights: np.ndarray, indent: str = "    ") -> str:
    """One character per entry of a (T, S) matrix of values in [0, 1]."""
    top = len(SHADES) - 1
    rows = []
    for row in np.asarray(weights):
        cells = "".join(SHADES[int(round(float(w) * top))] * 2 for w in np.clip(row, 0.0, 1.0))
        rows.append(f"{indent}|{cells}|")
    return "\n".join(rows)


def _line(value, lang: str) -> str:
    arr = np.asarray(value, dtype=np.float64)
    mean, std = LABELS[lang]["mean"], LABELS[lang]["std"]
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
            lines.append(f"    {LABELS[lang]['batch']} {b}:")
        if np.ndim(item) == 2:
            lines.append(format_array(item))
            continue
        for h, head in enumerate(item):        # (B, H, ., .): one block per head
            lines.append(f"    {LABELS[lang]['head']} {h}:")
            lines.append(format_array(head))
    return lines


def _heads(value, lang: str) -> list[str]:
    """(B, H, T, S) weights: batch item 0, each head as numbers and as a heatmap."""
    lines = []
    for h, weights in enumerate(np.asarray(value)[0]):
        lines.append(f"    {LABELS[lang]['head']} {h}:")
        lines.append(format_array(weights))
        lines.append(heatmap(weights))
    return lines


def _top(rows: list[dict], lang: str) -> list[str]:
    lines = [f"    {LABELS[lang]['top_header']}"]
    for rank, row in enumerate(rows, start=1):
        token = repr(row["token"])
        lines.append(f"    {rank}.  {row['id']:>6}  {token:<14}  {row['prob']:.{PRECISION}f}")
    return lines


def _value_lines(step: Step, lang: str) -> list[str]:
    if step.show == "line":
        return [_line(step.value, lang)]
    if step.show == "heads":
        return _heads(step.value, lang)
    if step.show == "heatmap":
        return _full(step.value, lang) + [heatmap(np.asarray(step.value)[0])]
    if step.show == "tokens":
        return ["    " + " ".join(step.value)]
    if step.show == "top":
        return _top(step.value, lang)
    if step.show == "lines":
        return ["    " + line for line in step.value]
    return _full(step.value, lang)


def render_steps(steps: list[Step], lang: str, start: int) -> list[str]:
    """Numbered steps: key and algebra, the explanation, the values, a blank line."""
    lines = []
    for number, step in enumerate(steps, start=start):
        algebra = step.algebra.splitlines() or [""]
        lines.append(f"[{number}] {step.key}    {algebra[0]}")
        lines += ["        " + extra for extra in algebra[1:]]
        lines.append("    " + step.text[lang])
        lines += _value_lines(step, lang)
        lines.append("")
    return lines


def check_line(check: Check | None, lang: str, *, verdict: bool = True) -> str:
    """The check's worst relative error, OK or MISMATCH (when `verdict`), and each input's."""
    labels = LABELS[lang]
    if check is None:
        return labels["check_skipped"]
    parts = [f"d{name} {err:.1e}" for name, err in check.rel_err.items()]
    parts += [f"d{name} = 0, |numeric| {err:.1e}" for name, err in check.zero_err.items()]
    mark = f"{labels['check_ok'] if check.ok else labels['check_bad']}  " if verdict else ""
    return f"{labels['check']} {check.max_rel_err:.1e}  {mark}({', '.join(parts)})"


def headings(result: Result, lang: str) -> tuple[str, str]:
    """The forward and backward heading lines: the part's own, or "<title>: forward pass"."""
    part = result.part
    if part.headings is not None:
        return part.headings(result.options, lang)
    title = part.text[lang]["title"]
    return f"{title}: {LABELS[lang]['forward']}", f"{title}: {LABELS[lang]['backward']}"


def render_text(result: Result, lang: str) -> str:
    """The part as numbered steps with explanations, then (if run) the backward and the check."""
    forward_heading, backward_heading = headings(result, lang)
    lines = [f"== {forward_heading} ==", ""]
    lines += render_steps(result.forward, lang, start=1)
    if result.backward is not None:
        lines += [f"== {backward_heading} ==", ""]
        lines += render_steps(result.backward, lang, start=len(result.forward) + 1)
        lines.append(check_line(result.check, lang, verdict=result.part.verdict))
    return "\n".join(line.rstrip() for line in lines).rstrip() + "\n"


def to_jsonable(value):
    """Arrays -> nested lists of Python numbers; -inf -> JSON_NEG_INF; bools stay bools; token
    pieces and the top-k table (lists of str / dict) as they are."""
    if isinstance(value, list) and (not value or isinstance(value[0], (str, dict))):
        return value
    if np.ndim(value) == 0:
        number = float(value)
        return JSON_NEG_INF if math.isinf(number) and number < 0 else number
    arr = np.asarray(value)
    if arr.dtype == np.bool_:
        return arr.tolist()
    arr = np.where(np.isneginf(arr), JSON_NEG_INF, arr.astype(np.float64))
    return arr.tolist()


def to_json(result: Result) -> dict:
    """{"part", "options", "forward": {key: array}, "backward": {...}, "check": {...}}.

    Arrays are nested lists; "check" holds "max_rel_err", "rel_err" and "zero_err" per input
    and "ok"; "backward" and "check" are null when not run (the check also for a loaded model).
    """
    payload = {"part": result.part.name, "options": result.options,
               "forward": {step.key: to_jsonable(step.value) for step in result.forward},
               "backward": None, "check": None}
    if result.backward is not None:
        payload["backward"] = {step.key: to_jsonable(step.value) for step in result.backward}
    if result.check is not None:
        payload["check"] = {"max_rel_err": result.check.max_rel_err,
                            "rel_err": result.check.rel_err, "zero_err": result.check.zero_err,
                            "ok": result.check.ok}
    return payload
