"""Hostile inputs outside training's own checks: one clear line on stderr, exit 2, nothing written.

A truncated or corrupt GGUF says which and where (tokenizer and model loading); a closed stdout
pipe ends quietly; `embed --dims` <= 0 is refused before the model loads; `train --workers` above
the cores is capped with a notice. (An empty tokenizer corpus: tests/tokenizers/test_bpe_train.py.)
"""
import subprocess
import sys
from pathlib import Path

import pytest

from glassformer.cli import main
from glassformer.errors import GlassformerError
from glassformer.packaged import MODEL, packaged_path

CUT_IN_METADATA = 100_000      # inside tokenizer.ggml.tokens of SmolLM2's GGUF
CUT_IN_DATA = 5_000_000        # inside token_embd.weight's data
DAMAGED_LENGTH_AT = 5_000      # the length of a token string: set to 2**64 - 1


@pytest.fixture(scope="module")
def gguf_bytes() -> bytes:
    try:
        path = packaged_path("smollm2", MODEL)
    except GlassformerError as err:
        pytest.skip(str(err))
    return Path(path).read_bytes()


def one_error_line(capsys) -> str:
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1 and "Traceback" not in captured.err
    return captured.err


@pytest.mark.parametrize("cut, where", [
    (CUT_IN_METADATA, "metadata key 24 (tokenizer.ggml.tokens)"),
    (CUT_IN_DATA, "the data of tensor token_embd.weight"),
    (10, "the header"),
])
def test_truncated_gguf_says_truncated_and_where(tmp_path, capsys, gguf_bytes, cut, where):
    path = tmp_path / "cut.gguf"
    path.write_bytes(gguf_bytes[:cut])
    assert main(["tokenizer", "encode", "--tokenizer", str(path), "hi"]) == 2
    err = one_error_line(capsys)
    assert "is a truncated GGUF" in err and where in err and f"ends at {cut}" in err
    assert main(["generate", "--model", str(path), "--max-new-tokens", "1", "hi"]) == 2
    err = one_error_line(capsys)
    assert "is a truncated GGUF" in err and where in err


def test_corrupt_gguf_says_corrupt_and_where(tmp_path, capsys, gguf_bytes):
    damaged = bytearray(gguf_bytes[:CUT_IN_DATA])
    damaged[DAMAGED_LENGTH_AT:DAMAGED_LENGTH_AT + 8] = b"\xff" * 8
    path = tmp_path / "corrupt.gguf"
    path.write_bytes(bytes(damaged))
    for argv in (["tokenizer", "encode", "--tokenizer", str(path), "hi"],
                 ["generate", "--model", str(path), "--max-new-tokens", "1", "hi"]):
        assert main(argv) == 2
        err = one_error_line(capsys)
        assert "is a corrupt GGUF: metadata key 24 (tokenizer.ggml.tokens)" in err


def test_a_file_that_is_not_gguf_is_named(tmp_path, capsys):
    path = tmp_path / "text.gguf"
    path.write_text("hello, this is not a model at all", encoding="utf-8")
    assert main(["tokenizer", "encode", "--tokenizer", str(path), "hi"]) == 2
    assert "is not a GGUF file" in one_error_line(capsys)
    path.write_bytes(b"")
    assert main(["tokenizer", "encode", "--tokenizer", str(path), "hi"]) == 2
    assert "is empty" in one_error_line(capsys)


def test_a_closed_stdout_pipe_ends_quietly(tmp_path):
    text = tmp_path / "long.txt"
    text.write_text("every token is a row of the table " * 5_000, encoding="utf-8")
    child = subprocess.Popen([sys.executable, "-m", "glassformer", "tokenizer", "encode",
                              "--tokenizer", "gpt2", "--file", str(text)],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert child.stdout.readline()  # like `| head -1`: one line, then the reader goes away
    child.stdout.close()
    status = child.wait(timeout=120)
    assert status in (0, 141)
    assert child.stderr.read() == b""


@pytest.mark.parametrize("command, flag, value", [
    ("embed", "--dims", "-3"), ("embed", "--dims", "0"), ("embed", "--max-length", "-1"),
    ("fill-mask", "--top-k", "0"), ("translate", "--beam", "0")])
def test_sizes_below_one_are_refused_before_loading(capsys, command, flag, value):
    # the model named does not exist: the check must come before any loading
    assert main([command, "--model", "/nonexistent/model", flag, value, "a text"]) == 2
    assert f"{flag} must be at least 1, got {value}" in one_error_line(capsys)


def test_workers_above_the_cores_are_capped_with_a_notice(tmp_path, capsys, monkeypatch):
    from glassformer.cli import train as train_command

    monkeypatch.setattr(train_command, "usable_cores", lambda: 1)
    data = tmp_path / "text.txt"
    data.write_text("to be or not to be, that is the question\n" * 200, encoding="utf-8")
    out = tmp_path / "run"
    assert main(["train", "--data", str(data), "--out", str(out), "--workers", "4",
                 "--batch-size", "4", "--max-iters", "2", "--eval-interval", "2",
                 "--eval-iters", "1", "--n-layer", "1", "--n-head", "2", "--d-model", "16",
                 "--block-size", "16", "--no-progress"]) == 0
    err = capsys.readouterr().err
    assert "note: --workers 4 is more than the 1 core here: training with 1" in err
    assert (out / "latest").exists() or any(out.iterdir())
