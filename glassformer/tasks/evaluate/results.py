"""The results file of an evaluation run, and comparing two of them item by item.

    {"model": ..., "adapter": ..., "shots": ..., "core": {"name", "value"},
     "tasks": {"arc_easy": {"n", "acc", "acc_stderr", "acc_norm", "acc_norm_stderr", "baseline",
                            "centred", "seconds", "tokens", "items": [{"line", "gold", "pred",
                            "pred_norm", "logliks", "token_logps"}, ...]}, ...}}

compare(old, new) lists, for each task both runs scored, the difference in accuracy and the
items (by file line) whose picked option changed.
"""
from __future__ import annotations

import json
from pathlib import Path

from glassformer.errors import GlassformerError
from glassformer.tasks.evaluate.metrics import core_name, stderr
from glassformer.tasks.evaluate.tasks_table import CORE_TASKS


def task_summary(result) -> dict:
    """A TaskResult's figures (without its items)."""
    out = {"kind": result.kind, "n": result.n, "acc": result.acc,
           "acc_stderr": stderr(result.acc, result.n), "baseline": result.baseline,
           "centred": result.centred, "seconds": result.seconds, "tokens": result.tokens,
           "truncated": result.truncated}
    if result.acc_norm is not None:
        out["acc_norm"] = result.acc_norm
        out["acc_norm_stderr"] = stderr(result.acc_norm, result.n)
    return out


def core_of(results) -> dict:
    """CORE over the tasks of `results` that are CORE tasks: name and mean centred accuracy."""
    core = [r for r in results if r.name in {spec.name for spec in CORE_TASKS}]
    if not core:
        return {"name": None, "value": None}
    return {"name": core_name(len(core), len(CORE_TASKS)),
            "value": sum(r.centred for r in core) / len(core)}


def results_record(results, **run) -> dict:
    """The whole run as one JSON-ready dict (run: model, adapter, shots, limit)."""
    return {**run, "core": core_of(results),
            "tasks": {r.name: {**task_summary(r), "items": r.items} for r in results}}


def write_results(path: str | Path, record: dict) -> None:
    """Write the file whole (a temporary beside it, then renamed: nothing half-written)."""
    path = Path(path)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(record), encoding="utf-8")
    partial.replace(path)


def read_results(path: str | Path) -> dict:
    """A results file written by write_results, or a one-line error."""
    path = Path(path)
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise GlassformerError(f"results file {path} does not exist") from None
    except ValueError:
        raise GlassformerError(f"{path} is not a results JSON of glassformer eval") from None
    if not isinstance(record, dict) or not isinstance(record.get("tasks"), dict):
        raise GlassformerError(f"{path} is not a results JSON of glassformer eval (no tasks)")
    return record


def compare(old: dict, new: dict) -> list[dict]:
    """Per task in both: acc difference and the lines whose picked option changed."""
    rows = []
    for name, task in new["tasks"].items():
        before = old["tasks"].get(name)
        if before is None:
            continue
        picks = {item["line"]: item["pred"] for item in before["items"]}
        changed = [{"line": item["line"], "gold": item["gold"], "before": picks[item["line"]],
                    "after": item["pred"]}
                   for item in task["items"]
                   if item["line"] in picks and picks[item["line"]] != item["pred"]]
        rows.append({"task": name, "acc_before": before["acc"], "acc_after": task["acc"],
                     "difference": task["acc"] - before["acc"], "changed": changed})
    return rows
