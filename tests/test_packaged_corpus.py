"""Issue 49: Tiny Shakespeare ships inside the package, and `--data tinyshakespeare` names it, so
the tour trains offline from a fresh clone with nothing beside it (no ../shared/data).

The shipped file is the standard one (nanoGPT's shakespeare_char prepare.py reports 1,115,394
characters and 65 distinct ones), package data in pyproject.toml, and a train run in a bare folder
reads it and learns.
"""
from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from glassformer.errors import GlassformerError
from glassformer.notebooks import find_data
from glassformer.packaged import CORPORA, DATA_DIR, corpus_path, data_path

ROOT = Path(__file__).resolve().parents[1]


def test_the_shipped_corpus_is_tiny_shakespeare():
    path = corpus_path("tinyshakespeare")
    raw = path.read_bytes()
    text = raw.decode("utf-8")
    assert len(raw) == len(text) == 1_115_394 and len(set(text)) == 65
    assert text.count("\n") == 40_000 and text.startswith("First Citizen:\nBefore we proceed")
    assert hashlib.sha256(raw).hexdigest() == CORPORA["tinyshakespeare"].sha256
    assert (DATA_DIR / "tinyshakespeare.SOURCE.txt").is_file()   # where it comes from


def test_every_corpus_is_package_data():
    """A wheel or a non-editable install carries every corpus file (pyproject's package-data)."""
    tomllib = pytest.importorskip("tomllib")   # Python 3.11+
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    patterns = config["tool"]["setuptools"]["package-data"]["glassformer"]
    for corpus in CORPORA.values():
        assert any(fnmatch.fnmatch(f"data/{corpus.file}", pattern) for pattern in patterns)


def test_data_path_names_the_corpus_and_leaves_everything_else(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert data_path("tinyshakespeare") == str(corpus_path("tinyshakespeare"))
    for other in ("cmudict", "tang-couplets:x.txt", "absent.txt", "../shared/data/x.txt"):
        assert data_path(other) == other      # the command reading it says what is wrong
    (tmp_path / "tinyshakespeare").write_text("my own", encoding="utf-8")
    assert data_path("tinyshakespeare") == "tinyshakespeare"   # a file here comes first
    with pytest.raises(GlassformerError, match="shipped: tinyshakespeare"):
        corpus_path("shakespeare")


def test_train_on_the_shipped_corpus_in_a_bare_folder(tmp_path):
    """`glassformer train --data tinyshakespeare --max-iters 50` in a folder with no
    ../shared/data anywhere above it (sizes made small, one process, so it takes seconds)."""
    assert find_data("tinyshakespeare.txt", tmp_path) is None
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    small = ["--n-layer", "1", "--batch-size", "4", "--eval-iters", "2", "--workers", "1",
             "--no-progress"]
    done = subprocess.run([sys.executable, "-m", "glassformer", "train", "--data",
                           "tinyshakespeare", "--max-iters", "50", *small],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    record = json.loads((tmp_path / "out" / "data.json").read_text(encoding="utf-8"))
    assert record["sha256"] == CORPORA["tinyshakespeare"].sha256
    assert Path(record["path"]) == corpus_path("tinyshakespeare").resolve()
    log = [json.loads(line) for line in
           (tmp_path / "out" / "train_log.jsonl").read_text(encoding="utf-8").splitlines()]
    val = [row["val_loss"] for row in log if "val_loss" in row]
    assert val[-1] < val[0] - 0.5   # from ln 65 = 4.17 towards 3
