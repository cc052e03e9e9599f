"""Reading a JSONL data file: one JSON value a line, as every data reader of the package reads it.

    {"messages": [...]}                      chat conversations (train/datasets/chat.py)
    {"prompt": ..., "chosen": ..., ...}      preference pairs (train/datasets/prefs.py)
    {"prompt": ..., "answer": ...}           GRPO prompts (train/datasets/prompts.py)

The file is read as its writer meant it, whatever tool saved it: UTF-8 with or without a
byte-order mark (Windows' Notepad and PowerShell write one), LF, CRLF or CR line ends, blank lines
skipped. Line numbers count every line, blank ones included, so an error names the line an editor
shows. Refused in one line naming the file and the line: a line that is not JSON, text that is
not UTF-8, a file that does not exist or holds no records. What a record must hold is the
caller's check (it names the line too, from the numbers given here).
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Iterator

from glassformer.errors import GlassformerError

LINE_END = re.compile(r"\r\n|\r|\n")   # Python's universal newlines, as text-mode files read


def read_text(path: str | Path) -> str:
    """The file's text, decoded from UTF-8 with its byte-order mark (if any) dropped."""
    path = Path(path)
    if not path.is_file():
        raise GlassformerError(f"data file {path} does not exist")
    try:
        data = path.read_bytes()
    except OSError as err:
        raise GlassformerError(f"cannot read {path}: {err.strerror}") from None
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        line = data[:err.start].count(b"\n") + 1
        raise GlassformerError(f"{path} line {line} is not UTF-8 text (byte "
                               f"{data[err.start]:#04x}); save the file as UTF-8") from None


def json_lines(path: str | Path) -> Iterator[tuple[int, object]]:
    """(line number, value) for each non-blank line, in order, parsed as it is reached.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     path = Path(folder, "a.jsonl")
    ...     _ = path.write_bytes(b'\\xef\\xbb\\xbf{"a": 1}\\r\\n\\r\\n[2]\\r\\n')
    ...     list(json_lines(path))
    [(1, {'a': 1}), (3, [2])]
    """
    for number, line in enumerate(LINE_END.split(read_text(path)), start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except ValueError:
            raise GlassformerError(f"{path} line {number} is not valid JSON") from None
        yield number, value


def read_json_lines(path: str | Path, kind: str = "records") -> list[tuple[int, object]]:
    """Every (line number, value) of the file; refused when it holds none.
    kind: what its records are, for that error ("conversations", ...)."""
    records = list(json_lines(path))
    if not records:
        raise GlassformerError(f"data file {path} holds no {kind}")
    return records
