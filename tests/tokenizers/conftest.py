"""Fixtures for the tokenizer tests: the shared corpora and the installed reference tokenizer files.

Each fixture skips (with a message naming the missing file or package) instead of failing, so the
suite runs on a checkout without ../shared/data or without the test extras.
"""
from pathlib import Path

import pytest

DATA_DIR = Path(__file__).resolve().parents[2] / ".." / "shared" / "data"


def read_corpus(name: str) -> str:
    """The text of ../shared/data/<name>, or a pytest skip naming the file."""
    path = DATA_DIR / name
    if not path.is_file():
        pytest.skip(f"corpus {name} not found at {path.resolve()}")
    return path.read_text(encoding="utf-8")


@pytest.fixture(scope="session")
def tiny_shakespeare() -> str:
    return read_corpus("tinyshakespeare.txt")


@pytest.fixture(scope="session")
def tang_poems() -> str:
    return read_corpus("tang_poems.txt")


@pytest.fixture(scope="session")
def tang_quatrains() -> str:
    return read_corpus("tang_quatrains.txt")
