"""`glassformer generate --json-schema FILE`: a bad schema is one line before any model loads; on
SmolLM2 (slow) the text written is a value the schema accepts."""
import json

import jsonschema
import pytest

from glassformer.cli import main
from glassformer.errors import GlassformerError
from glassformer.packaged import MODEL, packaged_path

SCHEMA = {"type": "object", "properties": {"x": {"type": "integer", "minimum": 1, "maximum": 9},
                                           "y": {"type": "string", "enum": ["a", "b"]}},
          "required": ["x", "y"], "additionalProperties": False}


def test_unsupported_schema_is_one_line(tmp_path, capsys):
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"type": "string", "format": "uri"}), encoding="utf-8")
    assert main(["generate", "--model", "does-not-exist", "x", "--json-schema", str(path)]) == 2
    err = capsys.readouterr().err
    assert "unsupported JSON schema keyword 'format'" in err and err.count("\n") == 1


@pytest.mark.slow
def test_smollm2_writes_a_valid_value(tmp_path, capsys):
    try:
        packaged_path("smollm2", MODEL)
    except GlassformerError as err:
        pytest.skip(str(err))
    path = tmp_path / "s.json"
    path.write_text(json.dumps(SCHEMA), encoding="utf-8")
    assert main(["generate", "--model", "smollm2", "A point:", "--json-schema", str(path),
                 "--temperature", "1", "--max-new-tokens", "40"]) == 0
    jsonschema.validate(json.loads(capsys.readouterr().out), SCHEMA)


@pytest.mark.slow
def test_smollm2_chat_replies_with_a_valid_value(tmp_path, capsys):
    try:
        packaged_path("smollm2", MODEL)
    except GlassformerError as err:
        pytest.skip(str(err))
    path = tmp_path / "s.json"
    path.write_text(json.dumps(SCHEMA), encoding="utf-8")
    assert main(["chat", "--model", "smollm2", "--message", "Give me a point.",
                 "--json-schema", str(path), "--max-new-tokens", "40"]) == 0
    jsonschema.validate(json.loads(capsys.readouterr().out), SCHEMA)
