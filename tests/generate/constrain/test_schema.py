"""The supported subset of JSON schema: what compiles, and one-line errors for what does not."""
import pytest

from glassformer.errors import GlassformerError
from glassformer.generate.constrain import compile_schema
from glassformer.generate.constrain.pattern import advance, compile_pattern, matched, start_states
from schemas import SCHEMAS


def test_every_test_schema_compiles():
    for schema in SCHEMAS:
        assert compile_schema(schema).nodes


@pytest.mark.parametrize("schema, words", [
    ({"type": "string", "format": "email"}, "unsupported JSON schema keyword 'format'"),
    ({"type": "object", "properties": {"a": {"type": "integer", "multipleOf": 3}}},
     "'multipleOf'"),
    ({"oneOf": [{"type": "string"}]}, "'oneOf'"),
    ({"type": "object", "additionalProperties": True}, "additionalProperties"),
    ({"$ref": "#/$defs/a", "$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}},
     "$ref cycle"),
    ({"$ref": "https://example.com/s.json"}, "only local $ref"),
    ({"$ref": "#/$defs/missing"}, "points nowhere"),
    ({"type": "string", "enum": [str(i) for i in range(10_000)]}, "an enum of 10,000 values"),
    ({"type": "object", "description": "x" * 1_000_000}, "1,000,037 characters"),
    ({"type": "string", "pattern": "(?=a)"}, "pattern"),
    ({"type": "integer", "minimum": 5, "maximum": 1}, "no number lies within"),
    ({"type": "date"}, "unsupported type 'date'"),
    ({}, "an empty schema"),
])
def test_unsupported_is_one_line_naming_it(schema, words):
    with pytest.raises(GlassformerError) as err:
        compile_schema(schema)
    assert words in str(err.value) and "\n" not in str(err.value)


def test_ref_expansion_is_bounded():
    defs = {f"d{i}": {"type": "array", "items": {"anyOf": [{"$ref": f"#/$defs/d{i + 1}"}] * 2}}
            for i in range(30)}
    defs["d30"] = {"type": "null"}
    with pytest.raises(GlassformerError, match="more than"):
        compile_schema({"$ref": "#/$defs/d0", "$defs": defs})


@pytest.mark.parametrize("pattern, good, bad", [
    ("^[A-Z]{2}-\\d{3}$", ["AB-123"], ["AB-12", "ab-123", "AB-1234"]),
    ("^(cat|dog)s?$", ["cat", "dogs"], ["cow", "cats!"]),
    ("x", ["x", "axb"], ["", "y"]),                 # unanchored: a search
    ("^a.c$", ["abc", "a-c"], ["a\nc", "ac"]),
])
def test_patterns(pattern, good, bad):
    compiled = compile_pattern(pattern)

    def full(text):
        at = start_states(compiled)
        for char in text:
            at = advance(compiled, at, ord(char))
        return matched(compiled, at)

    assert all(full(t) for t in good) and not any(full(t) for t in bad)
