"""Reward functions for GRPO, by name or from a file, with TRL's signature:

    f(prompts, completions, **columns) -> list[float | None]      one per completion

prompts and completions are strings, or message lists for a conversational dataset (the
completion is [{"role": "assistant", "content": ...}]); columns are the data set's other fields
and `completion_ids`, each a list as long as `completions`. None means "cannot score this one".

    REWARDS        the built-in rewards by name ("tang-form": tang_form.py)
    load_rewards   "tang-form" or "path/to/file.py:function", comma-separated -> [(name, f)]
    call_reward    runs one, turning a raise, a wrong-length answer or a NaN or infinite
                   reward into one line (None stays: "cannot score", NaN inside)
    probe_rewards  each on one group of empty completions, before a run writes anything
"""
from __future__ import annotations

import importlib.util
import math
from pathlib import Path
from typing import Callable

from glassformer.errors import GlassformerError
from glassformer.train.rewards.tang_form import tang_form

REWARDS: dict[str, Callable] = {"tang-form": tang_form}


def load_reward(spec: str) -> tuple[str, Callable]:
    """(its name, the function) for "NAME" or "FILE.py:FUNC"."""
    spec = spec.strip()
    if spec in REWARDS:
        return spec, REWARDS[spec]
    path, _, name = spec.rpartition(":")
    if not path or not name or not path.endswith(".py"):
        raise GlassformerError(f"reward {spec!r} is neither a built-in ({', '.join(REWARDS)}) "
                               "nor FILE.py:FUNCTION")
    if not Path(path).is_file():
        raise GlassformerError(f"reward file {path} does not exist")
    module_spec = importlib.util.spec_from_file_location(f"glassformer_reward_{Path(path).stem}",
                                                         path)
    module = importlib.util.module_from_spec(module_spec)
    try:
        module_spec.loader.exec_module(module)   # the user's own code, as TRL runs it
    except Exception as err:   # noqa: BLE001 - any failure of user code is one line
        raise GlassformerError(f"reward file {path} failed to load: {type(err).__name__}: "
                               f"{err}") from None
    function = getattr(module, name, None)
    if not callable(function):
        raise GlassformerError(f"reward file {path} has no function {name!r}")
    return name, function


def load_rewards(specs: str) -> list[tuple[str, Callable]]:
    """Every reward of a comma-separated list of specs."""
    names = [spec for spec in specs.split(",") if spec.strip()]
    if not names:
        raise GlassformerError("GRPO needs at least one reward: --reward tang-form or "
                               "--reward FILE.py:FUNC")
    return [load_reward(spec) for spec in names]


def call_reward(name: str, function: Callable, prompts: list, completions: list,
                columns: dict) -> list[float]:
    """The function's scores as floats (NaN for None, TRL's "cannot score this one"); one line
    if it raises, returns something other than one number (or None) per completion, or returns
    NaN or an infinity itself: a non-finite reward would turn every loss after it into NaN."""
    try:
        scores = function(prompts=prompts, completions=completions, **columns)
    except Exception as err:   # noqa: BLE001 - any failure of user code is one line
        raise GlassformerError(f"reward function {name} raised {type(err).__name__}: "
                               f"{err}") from None
    try:
        values = [None if score is None else float(score) for score in scores]
    except (TypeError, ValueError):
        raise GlassformerError(f"reward function {name} must return a list of numbers (or "
                               "None), one per completion") from None
    if len(values) != len(completions):
        raise GlassformerError(f"reward function {name} returned {len(values)} rewards for "
                               f"{len(completions)} completions; it must return one per "
                               "completion")
    for value, completion in zip(values, completions):
        if value is not None and not math.isfinite(value):
            raise GlassformerError(f"reward function {name} returned {value} for completion "
                                   f"{_shown(completion)}; a reward must be a finite number, "
                                   "or None when it cannot score")
    return [math.nan if value is None else value for value in values]


def _shown(completion, limit: int = 60) -> str:
    """A completion (text, or a conversational one's message content) quoted on one line."""
    if isinstance(completion, list) and completion and isinstance(completion[-1], dict):
        completion = completion[-1].get("content", "")
    text = str(completion)
    return repr(text if len(text) <= limit else text[:limit] + "...")


def probe_rewards(rewards: list, record: dict, group: int, conversational: bool) -> None:
    """Each reward function on one group of empty completions of the first prompt: a function
    that raises or answers with the wrong length is refused before anything is written."""
    empty = [{"role": "assistant", "content": ""}] if conversational else ""
    columns = {key: [value] * group for key, value in record.items() if key != "prompt"}
    columns["completion_ids"] = [[] for _ in range(group)]
    for name, function in rewards:
        call_reward(name, function, [record["prompt"]] * group, [empty] * group, columns)
