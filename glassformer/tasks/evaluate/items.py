"""Reading a task file: one item a line, in the MosaicML ICL formats, checked as it is read.

    multiple choice     {"query": str, "choices": [str, ...], "gold": int}
    schema              {"context_options": [str, ...], "continuation": str, "gold": int}
    language modelling  {"context": str, "continuation": str}

Every item becomes one `Item` whatever its type: the texts that change from request to request
(`options`: the choices, or the context options), the text they share (`shared`: the query, or
the continuation) and the right answer (`gold`; language modelling has one option and gold 0).
A line that is not JSON, lacks a field, has an empty option list or a gold outside it is refused
in one line naming the file and the line (io/jsonl.py numbers the lines as an editor shows them).
"""
from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

from glassformer.errors import GlassformerError
from glassformer.io.jsonl import json_lines
from glassformer.tasks.evaluate.tasks_table import CHOICE, LM, SCHEMA

FIELDS = {CHOICE: ("query", "choices", "gold"),
          SCHEMA: ("context_options", "continuation", "gold"),
          LM: ("context", "continuation")}


class Item(NamedTuple):
    line: int                 # the line of the file it came from
    shared: str               # the query (choice), the continuation (schema), the context (lm)
    options: tuple[str, ...]  # the choices (choice), the context options (schema),
                              # the one continuation (lm)
    gold: int                 # index of the right option


def _check(path, number: int, record, kind: str) -> Item:
    """One record as an Item, or a one-line error naming the file and line."""
    where = f"{path} line {number}"
    if not isinstance(record, dict):
        raise GlassformerError(f"{where} is not a JSON object")
    missing = [name for name in FIELDS[kind] if name not in record]
    if missing:
        raise GlassformerError(f"{where} lacks {', '.join(missing)} (a {kind} item has "
                               f"{', '.join(FIELDS[kind])})")
    if kind == LM:
        shared, options, gold = record["context"], [record["continuation"]], 0
    elif kind == CHOICE:
        shared, options, gold = record["query"], record["choices"], record["gold"]
    else:
        shared, options, gold = record["continuation"], record["context_options"], record["gold"]
    if not isinstance(options, list) or not options:
        raise GlassformerError(f"{where} has an empty choice list")
    if not all(isinstance(text, str) for text in [shared, *options]):
        raise GlassformerError(f"{where}: every text field must be a string")
    if not isinstance(gold, int) or isinstance(gold, bool) or not 0 <= gold < len(options):
        raise GlassformerError(f"{where}: gold must be an index into its {len(options)} "
                               f"options, got {gold!r}")
    return Item(number, shared, tuple(options), gold)


def read_items(path: str | Path, kind: str) -> list[Item]:
    """Every item of a task file, in order (the whole file: few-shot examples come from it)."""
    return [_check(path, number, record, kind) for number, record in json_lines(path)]
