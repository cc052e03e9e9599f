"""Fixtures the training tests share: a small slice of Tiny Shakespeare to train on."""
from pathlib import Path

import pytest

SHAKESPEARE = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "tinyshakespeare.txt"
CORPUS_CHARS = 20_000  # enough text for tiny models' train and val splits, quick to encode


@pytest.fixture
def corpus(tmp_path):
    """The first CORPUS_CHARS characters of Tiny Shakespeare, in tmp_path (skips when absent)."""
    if not SHAKESPEARE.is_file():
        pytest.skip(f"corpus {SHAKESPEARE} is absent")
    path = tmp_path / "corpus.txt"
    path.write_text(SHAKESPEARE.read_text(encoding="utf-8")[:CORPUS_CHARS], encoding="utf-8")
    return path
