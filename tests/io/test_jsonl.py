"""io/jsonl.py, the one reader of JSONL data files: a UTF-8 byte-order mark, CRLF or CR line ends
and blank lines are read as editors mean them, line numbers count every line, and what cannot be
read is refused in one line naming the file and the line."""
import json

import pytest

from glassformer.errors import GlassformerError
from glassformer.io.jsonl import json_lines, read_json_lines

BOM = "\ufeff"
RECORDS = [{"prompt": "寫一首五言絕句", "n": 1}, {"prompt": "a\u2028b\x85c"}, [1, 2]]


def write(path, text: str) -> None:
    path.write_bytes(text.encode("utf-8"))


@pytest.mark.parametrize("bom", ["", BOM], ids=["plain", "bom"])
@pytest.mark.parametrize("end", ["\n", "\r\n", "\r"], ids=["lf", "crlf", "cr"])
def test_every_form_of_the_same_file_reads_the_same(tmp_path, bom, end):
    path = tmp_path / "data.jsonl"
    lines = [json.dumps(record, ensure_ascii=False) for record in RECORDS]
    # a blank line and one of spaces between the records, and no line end after the last
    write(path, bom + end.join([lines[0], "", lines[1], "   ", lines[2]]))
    assert read_json_lines(path) == [(1, RECORDS[0]), (3, RECORDS[1]), (5, RECORDS[2])]


def test_a_line_separator_inside_a_string_is_not_a_line_end(tmp_path):
    # U+2028 and U+0085 may stand unescaped in JSON text: only \n, \r\n and \r end a line
    path = tmp_path / "data.jsonl"
    write(path, json.dumps(RECORDS[1], ensure_ascii=False) + "\n")
    assert read_json_lines(path) == [(1, RECORDS[1])]


@pytest.mark.parametrize("content, message", [
    ('{"a": 1}\r\n\r\n{"a": \r\n', "data.jsonl line 3 is not valid JSON"),
    (BOM + BOM + '{"a": 1}\n', "data.jsonl line 1 is not valid JSON"),   # only one mark is one
    ("\n \n", "data file .*data.jsonl holds no records"),
    (BOM, "data file .*data.jsonl holds no records"),
])
def test_refusals_name_the_file_and_the_line(tmp_path, content, message):
    path = tmp_path / "data.jsonl"
    write(path, content)
    with pytest.raises(GlassformerError, match=message):
        read_json_lines(path)


def test_text_that_is_not_utf8_is_refused_naming_its_line(tmp_path):
    path = tmp_path / "data.jsonl"
    path.write_bytes(b'{"a": 1}\n{"a": "\xe9"}\n')   # Latin-1, as an old Windows tool saves it
    with pytest.raises(GlassformerError, match=r"data.jsonl line 2 is not UTF-8 text.*UTF-8"):
        read_json_lines(path)


def test_a_missing_file_and_the_kind_of_records(tmp_path):
    with pytest.raises(GlassformerError, match="nowhere.jsonl does not exist"):
        read_json_lines(tmp_path / "nowhere.jsonl")
    write(tmp_path / "empty.jsonl", "")
    with pytest.raises(GlassformerError, match="holds no conversations"):
        read_json_lines(tmp_path / "empty.jsonl", "conversations")


def test_json_lines_parses_only_as_far_as_it_is_read(tmp_path):
    path = tmp_path / "data.jsonl"
    write(path, BOM + '{"chosen": 1}\r\nnot json\r\n')
    assert next(json_lines(path)) == (1, {"chosen": 1})
