"""Structured outputs: a request's `response_format` -> the MaskTable its replies are written in.

    {"type": "text"}                                       no constraint
    {"type": "json_object"}                                any JSON object
    {"type": "json_schema", "json_schema": {"name", "schema", "strict"}}   that schema
                                                           (generate/constrain/schema.py's subset)

A schema the subset does not cover is a 400 naming the keyword. `Grammars` keeps the vocabulary's
trie (built on the first structured request) and the tables of the schemas seen last, so a
schema's masks are computed once for every request and row that uses it. The tables are read
and grown only in the engine's thread; the ASGI side only compiles (checks) a schema.
"""
from __future__ import annotations

import json
import threading
from collections import OrderedDict

from glassformer.errors import GlassformerError
from glassformer.generate.constrain import MaskTable, compile_schema, json_table, vocabulary_trie
from glassformer.serve.protocol import ApiError, bad

MAX_TABLES = 16          # schemas whose masks are kept
ANY_OBJECT = "json_object"


def response_schema(body: dict):
    """None (no constraint), ANY_OBJECT, or the schema (a dict, checked) of response_format."""
    form = body.get("response_format")
    if form is None:
        return None
    if not isinstance(form, dict) or form.get("type") not in ("text", "json_object",
                                                             "json_schema"):
        raise bad("response_format", "an object whose 'type' is text, json_object or "
                  "json_schema", form)
    if form["type"] == "text":
        return None
    if form["type"] == "json_object":
        return ANY_OBJECT
    spec = form.get("json_schema")
    if not isinstance(spec, dict) or not isinstance(spec.get("schema"), dict):
        raise bad("response_format.json_schema", "an object with 'name' and 'schema' (a JSON "
                  "schema object)", spec)
    return checked_schema(spec["schema"], "response_format.json_schema.schema")


def checked_schema(schema: dict, where: str) -> dict:
    """The schema, once the supported subset has compiled it (else a 400 naming the fault)."""
    try:
        compile_schema(schema)
    except GlassformerError as err:
        raise ApiError(400, f"'{where}' is not supported: {err}", param=where.split(".")[0],
                       code="invalid_schema") from None
    except RecursionError:
        raise ApiError(400, f"'{where}' nests too deeply", param=where.split(".")[0],
                       code="invalid_schema") from None
    return schema


class Grammars:
    """The trie of one model's vocabulary and the MaskTables of recent schemas."""

    def __init__(self, model):
        self.model = model
        self.trie = None
        self.tables: OrderedDict = OrderedDict()
        self.lock = threading.Lock()

    def table(self, schema, eos_ids) -> MaskTable:
        """The table of a schema (a dict, or ANY_OBJECT) for replies ended by eos_ids."""
        key = (json.dumps(schema, sort_keys=True), tuple(sorted(eos_ids)))
        with self.lock:
            found = self.tables.get(key)
            if found is not None:
                self.tables.move_to_end(key)
                return found
            if self.trie is None:
                self.trie = vocabulary_trie(self.model.tokenizer, self.model.cfg.vocab_size)
            found = json_table(None if schema == ANY_OBJECT else schema, self.trie, eos_ids,
                               self.model.tokenizer.encode)
            self.tables[key] = found
            if len(self.tables) > MAX_TABLES:
                self.tables.popitem(last=False)
            return found
