"""The JSON schemas the constrained-decoding tests write values for: 40 small schemas over the
supported subset (nested objects, arrays, enums, anyOf, bounds, $ref, patterns). Every string
has a maxLength or an enum, so a reply ends within a few dozen tokens."""


def obj(properties: dict, required=None) -> dict:
    """An object schema with additionalProperties false; every property required unless
    `required` says which are."""
    return {"type": "object", "properties": properties,
            "required": list(properties) if required is None else required,
            "additionalProperties": False}


def text(limit: int = 12, **more) -> dict:
    return {"type": "string", "maxLength": limit, **more}


INT = {"type": "integer"}
NUM = {"type": "number"}
BOOL = {"type": "boolean"}

SCHEMAS = [
    obj({"name": text()}),
    obj({"name": text(), "age": {"type": "integer", "minimum": 0, "maximum": 120}}),
    obj({"ok": BOOL, "none": {"type": "null"}}),
    obj({"color": {"type": "string", "enum": ["red", "green", "blue"]}}),
    obj({"size": {"enum": ["S", "M", "L", 1, 2, True, None]}}),
    obj({"kind": {"const": "point"}, "x": INT, "y": INT}),
    obj({"tags": {"type": "array", "items": text(8), "maxItems": 3}}),
    obj({"xs": {"type": "array", "items": {"type": "integer", "minimum": -5, "maximum": 5},
                "minItems": 1, "maxItems": 4}}),
    obj({"a": text(), "b": text(), "c": text()}, required=["b"]),
    obj({"a": INT, "b": BOOL, "c": text(5)}, required=[]),
    obj({"point": obj({"x": INT, "y": INT})}),
    obj({"user": obj({"name": text(), "address": obj({"city": text(), "zip": text(5)})})}),
    obj({"items": {"type": "array", "maxItems": 2,
                   "items": obj({"id": INT, "label": text(6)})}}),
    obj({"value": {"anyOf": [INT, text(6), {"type": "null"}]}}),
    obj({"shape": {"anyOf": [obj({"r": NUM}), obj({"w": NUM, "h": NUM})]}}),
    obj({"n": {"type": ["integer", "null"]}}),
    obj({"price": {"type": "number", "minimum": 0, "maximum": 1000}}),
    obj({"t": {"type": "number", "exclusiveMinimum": -1, "exclusiveMaximum": 1}}),
    obj({"year": {"type": "integer", "minimum": 1900, "maximum": 2100}}),
    obj({"big": {"type": "integer", "minimum": 100}}),
    obj({"neg": {"type": "integer", "maximum": -10}}),
    obj({"code": {"type": "string", "pattern": "^[A-Z]{2}-[0-9]{3}$"}}),
    obj({"word": {"type": "string", "pattern": "^[a-z]+$", "maxLength": 10}}),
    obj({"id": {"type": "string", "minLength": 2, "maxLength": 4}}),
    obj({"r": NUM}),
    {"type": "array", "items": INT, "maxItems": 5},
    {"type": "array", "items": text(4), "minItems": 2, "maxItems": 3},
    {"type": "string", "enum": ["yes", "no", "maybe"]},
    {"type": "integer", "minimum": 0, "maximum": 999},
    {"type": "boolean"},
    {"anyOf": [obj({"ok": {"const": True}}), obj({"error": text()})]},
    {"$defs": {"pt": obj({"x": INT, "y": INT})},
     **obj({"from": {"$ref": "#/$defs/pt"}, "to": {"$ref": "#/$defs/pt"}})},
    {"definitions": {"name": text(8)},
     **obj({"first": {"$ref": "#/definitions/name"}, "last": {"$ref": "#/definitions/name"}})},
    obj({"matrix": {"type": "array", "maxItems": 2,
                    "items": {"type": "array", "items": INT, "maxItems": 2}}}),
    obj({"q": text(), "answers": {"type": "array", "maxItems": 3, "items": {
        "type": "string", "enum": ["A", "B", "C", "D"]}}, "score": {
        "type": "number", "minimum": 0, "maximum": 1}}),
    obj({"step": {"type": "integer", "exclusiveMinimum": 0, "exclusiveMaximum": 10}}),
    obj({"name": text(), "email": text(20), "admin": BOOL, "age": INT}, required=["name"]),
    obj({"status": {"enum": ["active", "inactive"]},
         "meta": obj({"created": text(10), "tags": {"type": "array", "items": text(5),
                                                    "maxItems": 2}})}),
    obj({"emoji": text(3), "count": {"type": "integer", "minimum": 0, "maximum": 9}}),
    obj({"tool": {"const": "search"}, "arguments": obj({"query": text(16),
                                                        "limit": {"type": "integer",
                                                                  "minimum": 1,
                                                                  "maximum": 50}})}),
]
