"""Few-shot prompts: the strings each item's requests score, as llm-foundry builds them.

    example     context + delimiter + its right continuation
    prompt      example_1 + "\\n" + ... + example_k + "\\n" + context + delimiter
    request     (prompt, continuation): the model scores the continuation after the prompt

    multiple choice   one request per choice:    (shots + query + delim, choice)
    schema            one per context option:    (shots + option + delim, continuation)
    language model    one request:               (shots + context + delim, continuation)

The k examples are drawn from the task's own file, never the item itself, with a generator
seeded by the item's index (nanochat's CORE does the same: random.Random(1234 + index)), so a
prompt is the same in every run and does not depend on --limit.
"""
from __future__ import annotations

import random

from glassformer.tasks.evaluate.items import Item
from glassformer.tasks.evaluate.tasks_table import EXAMPLE_SEPARATOR, SCHEMA, TaskSpec

SEED = 1234


def draw_shots(index: int, count: int, shots: int, seed: int = SEED) -> list[int]:
    """`shots` distinct item indices in [0, count), never `index`, the same for the same seed.

    >>> draw_shots(3, 10, 4) == draw_shots(3, 10, 4) and 3 not in draw_shots(3, 10, 4)
    True
    """
    others = [i for i in range(count) if i != index]
    return random.Random(seed + index).sample(others, min(shots, len(others)))


def pairs(spec: TaskSpec, item: Item) -> list[tuple[str, str]]:
    """(context, continuation) of each option, before any delimiter or shots."""
    if spec.kind == SCHEMA:
        return [(option, item.shared) for option in item.options]
    return [(item.shared, option) for option in item.options]


def example(spec: TaskSpec, item: Item) -> str:
    """A solved example: its context, the delimiter and its right continuation."""
    context, continuation = pairs(spec, item)[item.gold]
    return context + spec.delimiter + continuation


def requests(spec: TaskSpec, items: list[Item], index: int, shots: int,
             seed: int = SEED) -> list[tuple[str, str]]:
    """(prompt, continuation) for each option of items[index], with `shots` examples."""
    chosen = draw_shots(index, len(items), shots, seed)
    head = "".join(example(spec, items[i]) + EXAMPLE_SEPARATOR for i in chosen)
    return [(head + context + spec.delimiter, continuation)
            for context, continuation in pairs(spec, items[index])]
