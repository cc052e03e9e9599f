"""GRPO rewards must be finite (issue 49): a reward function's own NaN or infinity is refused in one
line naming the function and the completion; None stays TRL's "cannot score" (NaN inside)."""
import math

import numpy as np
import pytest

from glassformer.errors import GlassformerError
from glassformer.train.rewards import call_reward


def constant(value):
    return lambda prompts, completions, **columns: [value] * len(completions)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -math.inf, np.float32("nan"),
                                   "nan"])
def test_a_non_finite_reward_is_one_line_naming_function_and_completion(value):
    with pytest.raises(GlassformerError) as caught:
        call_reward("judge", constant(value), ["p", "p"], ["first line\nsecond", "x"], {})
    message = str(caught.value)
    assert "\n" not in message
    assert "reward function judge returned" in message
    assert "for completion 'first line\\nsecond'" in message and "None when it cannot" in message


def test_a_conversational_completion_is_named_by_its_content():
    completion = [{"role": "assistant", "content": "床前明月光" * 20}]
    with pytest.raises(GlassformerError, match="completion '床前明月光.*\\.\\.\\.'; a reward"):
        call_reward("judge", constant(math.inf), ["p"], [completion], {})


def test_none_stays_cannot_score_and_numbers_pass():
    scores = lambda prompts, completions, **columns: [None, 1, np.float32(0.5), True]  # noqa: E731
    values = call_reward("mixed", scores, ["p"] * 4, ["a", "b", "c", "d"], {})
    assert math.isnan(values[0]) and values[1:] == [1.0, 0.5, 1.0]
