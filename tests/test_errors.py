"""errors.check_choice: the one "must be one of" check of the package."""
from pathlib import Path

import pytest

import glassformer
from glassformer.errors import CheckpointError, GlassformerError, check_choice


def test_check_choice_names_the_setting_the_choices_and_the_value():
    check_choice("--schedule", "cosine", ("cosine", "inverse-sqrt"))
    with pytest.raises(GlassformerError) as err:
        check_choice("--schedule", "linear", ("cosine", "inverse-sqrt"))
    assert str(err.value) == "--schedule must be one of cosine, inverse-sqrt, got 'linear'"


def test_check_choice_raises_the_error_type_it_is_given():
    with pytest.raises(CheckpointError, match="dtype must be one of F32, F16, got 'I8'"):
        check_choice("dtype", "I8", ("F32", "F16"), CheckpointError)


def test_no_hand_written_choice_checks_remain():
    package = Path(glassformer.__file__).parent
    hand_written = [str(path.relative_to(package)) for path in package.rglob("*.py")
                    if path.name != "errors.py" and "must be one of" in path.read_text()]
    assert hand_written == []
