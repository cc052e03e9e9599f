"""From per-option log-likelihoods to the figures a benchmark reports.

    acc        share of items whose highest summed log-likelihood is the gold option
               (language modelling: share whose continuation is the greedy one)
    acc_norm   the same with each sum divided by its option's length in characters
               (lm-evaluation-harness's acc_norm; multiple choice only: a schema item's options
               share one continuation, so normalising changes nothing)
    stderr     sqrt(p (1 - p) / n), the standard error of a share p over n items
    centred    (acc - b) / (1 - b), b the task's random baseline: 0 at chance, 1 when perfect
    CORE       the mean centred accuracy over the tasks run (DCLM; "CORE-18" over all 18)
"""
from __future__ import annotations

import math

import numpy as np


def pick(sums: list[float], lengths: list[int] | None = None) -> int:
    """The option with the highest log-likelihood, per character when `lengths` are given
    (the first on ties, as numpy's argmax and lm-eval)."""
    scores = np.asarray(sums, np.float64)
    if lengths is not None:
        scores = scores / np.maximum(np.asarray(lengths, np.float64), 1.0)
    return int(np.argmax(scores))


def stderr(p: float, n: int) -> float:
    """Standard error of a share p measured on n items."""
    return math.sqrt(p * (1.0 - p) / n) if n else float("nan")


def centred(acc: float, baseline: float) -> float:
    """(acc - b) / (1 - b): chance is 0, a perfect score 1."""
    return (acc - baseline) / (1.0 - baseline)


def core_name(tasks_run: int, core_total: int) -> str:
    """"CORE-18" over the whole list, else "CORE over N tasks"."""
    return f"CORE-{core_total}" if tasks_run == core_total else f"CORE over {tasks_run} tasks"
