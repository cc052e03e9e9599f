"""The tiny model fixture (eval_fixtures.py)."""
import pytest

from eval_fixtures import tiny_model


@pytest.fixture(scope="module")
def model():
    return tiny_model()
