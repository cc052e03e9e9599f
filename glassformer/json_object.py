"""One JSON object read from a file (config.json, adapter_config.json, tokenizer_config.json), with
one-line errors."""
from __future__ import annotations

import json
from pathlib import Path

from glassformer.errors import GlassformerError


def read_json_object(path: Path, error: type[GlassformerError] = GlassformerError) -> dict:
    """The JSON object in `path`; an `error` naming the file when it is not one.

    The caller checks first that the file exists, since only it can say what the folder lacks,
    and names the error its readers expect (io/ raises CheckpointError).
    """
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError) as err:
        raise error(f"{path} is not valid JSON: {err}") from None
    if not isinstance(data, dict):
        raise error(f"{path} does not hold a JSON object")
    return data
