"""Preference pairs and GRPO prompts saved by Windows tools (a UTF-8 byte-order mark, CRLF line
ends) encode to exactly the data of the same file without them: every JSONL data file is read by
io/jsonl.py. Real lines of ../shared/data/tang_prefs.jsonl and tang_sft.jsonl when present (the
test skips naming the file when absent), and a few written here, which always run. `glassformer
eval` tells the preference file from others by its first record, with or without the mark."""
import json
from pathlib import Path

import numpy as np
import pytest

from glassformer.cli.eval import is_preference_file
from glassformer.tokenizers.bpe import BPETokenizer
from glassformer.tokenizers.chat_template import CHATML_TEMPLATE, ChatTemplate
from glassformer.train.datasets.prefs import encode_pref_file
from glassformer.train.datasets.prompts import encode_prompt_file

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"
BOM = "\ufeff"
SPECIALS = {"<|im_start|>": 256, "<|im_end|>": 257}
TEMPLATE = ChatTemplate(CHATML_TEMPLATE, {})
LINES = 4    # real lines taken from each file


def turn(role: str, content: str) -> list[dict]:
    return [{"role": role, "content": content}]


PAIR = {"prompt": turn("user", "寫一首五言絕句，以「四」字開頭。"),
        "chosen": turn("assistant", "四時運灰琯，一夕變冬春。"),
        "rejected": turn("assistant", "四四四四四。")}
WRITTEN = {
    "prefs": [json.dumps(PAIR, ensure_ascii=False),
              # a file holds one format (issue 49): the second pair is conversational too
              json.dumps({"prompt": turn("user", "then"), "chosen": turn("assistant", "yes"),
                          "rejected": turn("assistant", "no")})],
    "prompts": [json.dumps({"messages": turn("user", "写一首") + turn("assistant", "燄")},
                           ensure_ascii=False),
                json.dumps({"prompt": turn("user", "hi"), "answer": "四"}, ensure_ascii=False)],
}
REAL = {"prefs": "tang_prefs.jsonl", "prompts": "tang_sft.jsonl"}


def byte_tokenizer() -> BPETokenizer:
    return BPETokenizer({bytes([b]): b for b in range(256)}, [], special_tokens=SPECIALS)


def encode(kind: str, path: Path, tokenizer):
    if kind == "prefs":
        return encode_pref_file(path, tokenizer, TEMPLATE, block_size=1024)
    return encode_prompt_file(path, tokenizer, TEMPLATE, block_size=1024,
                              max_completion_tokens=8)


def same(a, b) -> bool:
    """Equal all the way down: arrays by value, dtype and shape; records field by field."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.dtype == b.dtype
                and a.shape == b.shape and np.array_equal(a, b))
    if isinstance(a, (tuple, list)):
        return (type(a) is type(b) and len(a) == len(b)
                and all(same(x, y) for x, y in zip(a, b)))
    if isinstance(a, dict):
        return (isinstance(b, dict) and list(a) == list(b)
                and all(same(a[key], b[key]) for key in a))
    return a is b or a == b


def lines_of(kind: str, source: str) -> list[str]:
    if source == "written":
        return WRITTEN[kind]
    path = DATA / REAL[kind]
    if not path.is_file():
        pytest.skip(f"{REAL[kind]} not found at {path}")
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\n") for line, _ in zip(f, range(LINES))]


@pytest.mark.parametrize("source", ["written", "shared-data"])
@pytest.mark.parametrize("kind", ["prefs", "prompts"])
def test_bom_and_crlf_encode_to_the_same_data(tmp_path, kind, source):
    lines = lines_of(kind, source)
    unix, windows = tmp_path / "unix.jsonl", tmp_path / "windows.jsonl"
    unix.write_bytes(("\n".join(lines) + "\n").encode("utf-8"))
    windows.write_bytes((BOM + "\r\n".join(lines) + "\r\n").encode("utf-8"))
    assert windows.read_bytes().startswith(b"\xef\xbb\xbf")
    tokenizer = byte_tokenizer()
    expected, got = encode(kind, unix, tokenizer), encode(kind, windows, tokenizer)
    assert same(got, expected)
    rows = expected.n if kind == "prefs" else len(expected.records)
    assert rows == len(lines)
    # `glassformer eval` tells a preference file by its first record, the marked one too
    assert is_preference_file(str(windows)) == is_preference_file(str(unix)) == (kind == "prefs")
