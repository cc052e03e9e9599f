"""One JSON object read from a file (config.json, adapter_config.json), with one-line errors."""
from __future__ import annotations

import json
from pathlib import Path

from glassformer.errors import CheckpointError


def read_json_object(path: Path) -> dict:
    """The JSON object in `path`; a CheckpointError naming the file when it is not one.

    The caller checks first that the file exists, since only it can say what the folder lacks.
    """
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError) as err:
        raise CheckpointError(f"{path} is not valid JSON: {err}") from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{path} does not hold a JSON object")
    return data
