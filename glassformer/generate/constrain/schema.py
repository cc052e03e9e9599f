"""A JSON schema -> a grammar: a table of nodes, each one kind of JSON value.

    {"type": "object", "properties": {"n": {"type": "integer", "minimum": 1}}, "required": ["n"]}
        --compile_schema--> Grammar(nodes=[Obj(props=(('"n"', 1, True),)), Num(integer, 1..)])

Supported (anything else is a GlassformerError naming the keyword):
    object   properties, required, additionalProperties (only false: no other key is ever
             written; absent counts as false, as OpenAI's strict mode), keys in `properties` order
    string   enum, const, minLength, maxLength, a simple pattern (literals, [classes], ., \\d \\w
             \\s, ?, *, +, {m,n}, groups with |; ^ and $ anchors)
    number / integer   minimum, maximum, exclusiveMinimum, exclusiveMaximum
    boolean, null, array (items, minItems, maxItems), anyOf, a list of types, enum / const of
    any JSON values, nested objects, local $ref (#/$defs/..., #/definitions/...), no cycles
    {"type": "json_object"} (OpenAI's response_format): any JSON object (ANY_OBJECT)

Annotations (title, description, default, examples, $schema, $id, $comment, strict) are read
and ignored. The whitespace rule is none at all: values are written compact, `{"a":1,"b":[2,3]}`,
which is llguidance's `whitespace_flexible: false` with its default separators "," and ":".
"""
from __future__ import annotations

import json
from fractions import Fraction
from typing import NamedTuple

from glassformer.errors import GlassformerError
from glassformer.generate.constrain.pattern import compile_pattern

MAX_SCHEMA_CHARS = 100_000     # a schema written longer than this is refused
MAX_NODES = 2_000              # grammar nodes (after $ref expansion)
MAX_ENUM = 1_000               # values of one enum
IGNORED = {"title", "description", "default", "examples", "$schema", "$id", "$comment",
           "strict", "$defs", "definitions", "deprecated", "readOnly", "writeOnly"}
KEYWORDS = {
    "object": {"type", "properties", "required", "additionalProperties"},
    "string": {"type", "minLength", "maxLength", "pattern", "enum", "const"},
    "number": {"type", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"},
    "integer": {"type", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"},
    "array": {"type", "items", "minItems", "maxItems"},
    "boolean": {"type"}, "null": {"type"},
}

EVERY_KEYWORD = set().union(*KEYWORDS.values()) | {"anyOf", "$ref", "enum", "const"}


class Lit(NamedTuple):
    """One of a few exact texts (enum, const, true, false, null), sorted."""
    texts: tuple[bytes, ...]


class Str(NamedTuple):
    """A JSON string whose characters number min_len..max_len (None: no limit)."""
    min_len: int = 0
    max_len: int | None = None
    pattern: object = None           # pattern.Pattern or None


class Num(NamedTuple):
    """A JSON number (integer: no fraction or exponent) within the bounds (None: none)."""
    integer: bool
    low: Fraction | None = None
    high: Fraction | None = None
    low_strict: bool = False
    high_strict: bool = False


class Arr(NamedTuple):
    item: int                        # node of every item
    min_items: int = 0
    max_items: int | None = None


class Obj(NamedTuple):
    """Keys written in this order, each as its JSON text ('"name"'); a key not required may be
    left out."""
    props: tuple[tuple[bytes, int, bool], ...]    # (key text, value node, required)


class AnyOf(NamedTuple):
    options: tuple[int, ...]


class AnyValue(NamedTuple):
    """Any JSON value (json_object's keys' values, nested)."""


class AnyObj(NamedTuple):
    """Any JSON object."""


class AnyArr(NamedTuple):
    """Any JSON array."""


class Grammar(NamedTuple):
    nodes: tuple                     # node i; node 0 is the root
    root: int = 0


def json_text(value) -> bytes:
    """A JSON value written compact, as the automaton writes it."""
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def any_object_grammar() -> Grammar:
    """{"type": "json_object"}: any object, whose values are any JSON value."""
    nodes = (AnyObj(), AnyValue(), AnyArr(), Str(), Num(False), Lit(tuple(sorted(
        [b"true", b"false", b"null"]))))
    return Grammar(nodes)


def compile_schema(schema) -> Grammar:
    """A JSON schema (a dict) -> its Grammar, or a GlassformerError naming what is not
    supported."""
    if not isinstance(schema, dict):
        raise GlassformerError(f"a JSON schema must be an object, got {type(schema).__name__}")
    size = len(json.dumps(schema))
    if size > MAX_SCHEMA_CHARS:
        raise GlassformerError(f"the JSON schema is {size:,} characters; at most "
                               f"{MAX_SCHEMA_CHARS:,} are supported")
    builder = _Builder(schema)
    builder.node(schema, "#", ())
    return Grammar(tuple(builder.nodes))


class _Builder:
    """Walks a schema depth-first, appending one node per schema (refs are expanded)."""

    def __init__(self, root: dict):
        self.root = root
        self.nodes: list = []

    def add(self, node) -> int:
        if len(self.nodes) >= MAX_NODES:
            raise GlassformerError(f"the JSON schema expands to more than {MAX_NODES} nodes")
        self.nodes.append(node)
        return len(self.nodes) - 1

    def node(self, schema, where: str, refs: tuple) -> int:
        if schema is True or schema == {}:
            raise GlassformerError(f"{where}: an empty schema (any value) is not supported; "
                                   "give a type")
        if not isinstance(schema, dict):
            raise GlassformerError(f"{where}: a schema must be an object, got {schema!r:.40}")
        check_keywords(schema, EVERY_KEYWORD, where)          # an unknown keyword is named first
        if "$ref" in schema:
            return self.ref(schema, where, refs)
        if "anyOf" in schema:
            return self.any_of(schema, where, refs)
        if "enum" in schema or "const" in schema:
            return self.literal(schema, where)
        kind = schema.get("type")
        if isinstance(kind, list):
            if not kind or not all(isinstance(k, str) for k in kind):
                raise GlassformerError(f"{where}: 'type' must be a name or a list of names")
            slot = self.add(None)
            options = tuple(self.node({key: value for key, value in schema.items()
                                       if key in KEYWORDS.get(k, {"type"})} | {"type": k},
                                      where, refs) for k in kind)
            self.nodes[slot] = AnyOf(options)
            return slot
        if kind not in KEYWORDS:
            raise GlassformerError(f"{where}: unsupported type {kind!r} (supported: object, "
                                   "string, number, integer, boolean, array, null)")
        check_keywords(schema, KEYWORDS[kind], where)
        return getattr(self, "kind_" + kind)(schema, where, refs)

    def ref(self, schema, where, refs) -> int:
        check_keywords(schema, {"$ref"}, where)
        target = schema["$ref"]
        if not isinstance(target, str) or not target.startswith("#"):
            raise GlassformerError(f"{where}: only local $ref ('#/$defs/NAME') is supported, "
                                   f"got {target!r:.60}")
        if target in refs:
            raise GlassformerError(f"{where}: $ref cycle: {' -> '.join(refs + (target,))}; "
                                   "recursive schemas are not supported")
        found = self.root
        for part in [p for p in target[1:].split("/") if p]:
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(found, dict) or part not in found:
                raise GlassformerError(f"{where}: $ref {target!r} points nowhere in the schema")
            found = found[part]
        return self.node(found, target, refs + (target,))

    def any_of(self, schema, where, refs) -> int:
        check_keywords(schema, {"anyOf"}, where)
        options = schema["anyOf"]
        if not isinstance(options, list) or not options:
            raise GlassformerError(f"{where}: 'anyOf' must be a non-empty list of schemas")
        slot = self.add(None)
        self.nodes[slot] = AnyOf(tuple(self.node(option, f"{where}/anyOf/{i}", refs)
                                       for i, option in enumerate(options)))
        return slot

    def literal(self, schema, where) -> int:
        allowed = {"enum", "const", "type"}
        check_keywords(schema, allowed, where)
        values = [schema["const"]] if "const" in schema else schema["enum"]
        if not isinstance(values, list) or not values:
            raise GlassformerError(f"{where}: 'enum' must be a non-empty list")
        if len(values) > MAX_ENUM:
            raise GlassformerError(f"{where}: an enum of {len(values):,} values; at most "
                                   f"{MAX_ENUM:,} are supported")
        return self.add(Lit(tuple(sorted({json_text(v) for v in values}))))

    def kind_string(self, schema, where, refs) -> int:
        low = count(schema, "minLength", where, 0)
        high = count(schema, "maxLength", where, None)
        if high is not None and high < low:
            raise GlassformerError(f"{where}: maxLength {high} is below minLength {low}")
        pattern = schema.get("pattern")
        if pattern is not None and not isinstance(pattern, str):
            raise GlassformerError(f"{where}: 'pattern' must be a string")
        return self.add(Str(low, high, None if pattern is None else
                            compile_pattern(pattern, where)))

    def kind_number(self, schema, where, refs, integer=False) -> int:
        bounds = {}
        for name in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
            value = schema.get(name)
            if value is not None:
                if isinstance(value, bool) or not isinstance(value, (int, float)):
                    raise GlassformerError(f"{where}: '{name}' must be a number")
                bounds[name] = Fraction(value)
        low_strict = "exclusiveMinimum" in bounds
        high_strict = "exclusiveMaximum" in bounds
        low = bounds.get("exclusiveMinimum", bounds.get("minimum"))
        high = bounds.get("exclusiveMaximum", bounds.get("maximum"))
        if low is not None and high is not None and (low > high or (
                low == high and (low_strict or high_strict))):
            raise GlassformerError(f"{where}: no number lies within the bounds")
        return self.add(Num(integer, low, high, low_strict, high_strict))

    def kind_integer(self, schema, where, refs) -> int:
        return self.kind_number(schema, where, refs, integer=True)

    def kind_boolean(self, schema, where, refs) -> int:
        return self.add(Lit((b"false", b"true")))

    def kind_null(self, schema, where, refs) -> int:
        return self.add(Lit((b"null",)))

    def kind_array(self, schema, where, refs) -> int:
        if "items" not in schema:
            raise GlassformerError(f"{where}: an array needs 'items' (a schema)")
        slot = self.add(None)
        item = self.node(schema["items"], f"{where}/items", refs)
        low, high = count(schema, "minItems", where, 0), count(schema, "maxItems", where, None)
        if high is not None and high < low:
            raise GlassformerError(f"{where}: maxItems {high} is below minItems {low}")
        self.nodes[slot] = Arr(item, low, high)
        return slot

    def kind_object(self, schema, where, refs) -> int:
        extra = schema.get("additionalProperties", False)
        if extra is not False:
            raise GlassformerError(f"{where}: only 'additionalProperties': false is supported")
        props = schema.get("properties", {})
        required = schema.get("required", [])
        if not isinstance(props, dict) or not isinstance(required, list):
            raise GlassformerError(f"{where}: 'properties' must be an object and 'required' a "
                                   "list of names")
        missing = [name for name in required if name not in props]
        if missing:
            raise GlassformerError(f"{where}: required property {missing[0]!r} is not in "
                                   "'properties'")
        slot = self.add(None)
        found = tuple((json_text(name), self.node(sub, f"{where}/properties/{name}", refs),
                       name in required) for name, sub in props.items())
        self.nodes[slot] = Obj(found)
        return slot


def check_keywords(schema: dict, allowed: set, where: str) -> None:
    for key in schema:
        if key not in allowed and key not in IGNORED:
            raise GlassformerError(f"{where}: unsupported JSON schema keyword {key!r}")


def count(schema: dict, name: str, where: str, default):
    value = schema.get(name, default)
    if value is default:
        return value
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise GlassformerError(f"{where}: '{name}' must be an integer >= 0, got {value!r:.40}")
    return value
