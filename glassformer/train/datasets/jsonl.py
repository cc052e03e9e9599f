"""Reading a JSONL data file: (line number, object) for each non-blank line, errors naming the
line. The preference pairs (prefs.py) and the GRPO prompts (prompts.py) read their files with it."""
from __future__ import annotations

import json
from pathlib import Path

from glassformer.errors import GlassformerError


def read_json_lines(path: str | Path) -> list[tuple[int, object]]:
    """Every non-blank line of a JSONL file, parsed; one line for a missing file, a line that is
    not JSON, or a file with no records."""
    path = Path(path)
    if not path.is_file():
        raise GlassformerError(f"data file {path} does not exist")
    records = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                records.append((number, json.loads(line)))
            except ValueError:
                raise GlassformerError(f"{path} line {number} is not valid JSON") from None
    if not records:
        raise GlassformerError(f"data file {path} holds no records")
    return records
