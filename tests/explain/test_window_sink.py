"""`explain window` and `explain sink`: what the mask hides, where a sink's weight goes, and the
gradients checked, in both languages."""
import numpy as np
import pytest

from glassformer.cli import main
from glassformer.errors import GlassformerError
from glassformer.explain.parts import explain_part


def values(result, direction="forward"):
    steps = result.forward if direction == "forward" else result.backward
    return {step.key: step.value for step in steps}


def test_window_hides_exactly_the_keys_past_w_and_gets_no_gradient_there():
    result = explain_part("window", {"seq": 7, "window": 3}, seed=0, grad="random")
    forward, backward = values(result), values(result, "backward")
    hidden = forward["hidden"].astype(bool)
    i, j = np.nonzero(hidden)
    assert np.all(i - j >= 3)
    assert hidden.sum() == sum(max(0, q - 2) for q in range(7))      # keys past the W newest
    assert np.all(forward["weights"][..., hidden] == 0.0)
    np.testing.assert_allclose(forward["weights"].sum(-1), 1.0, rtol=1e-6)
    assert np.all(backward["dscores"][..., hidden] == 0.0)
    assert forward["ring"].tolist() == [0, 1, 2, 0, 1, 2, 0]
    assert result.check.ok


def test_sink_share_is_what_the_rows_lack_and_its_gradient_checks():
    result = explain_part("sink", {}, seed=0, grad="random")
    forward = values(result)
    np.testing.assert_allclose(forward["row_sums"] + forward["sink_share"], 1.0, rtol=1e-6)
    assert forward["sink_share"][0, 0].mean() > forward["sink_share"][0, 1].mean()  # stronger
    assert values(result, "backward")["dsinks"].shape == (2,)
    assert result.check.ok and "sinks" in result.check.rel_err


@pytest.mark.parametrize("part,lang,phrase", [("window", "en", "What the window hides"),
                                              ("window", "zh", "窗口遮住了什么"),
                                              ("sink", "en", "Where the missing weight went"),
                                              ("sink", "zh", "少掉的权重去了哪里")])
def test_commands_print_in_both_languages(part, lang, phrase, capsys):
    assert main(["explain", part, "--backward", "--lang", lang]) == 0
    out = capsys.readouterr().out
    assert phrase in out and ("OK" if lang == "en" else "通过") in out


def test_a_window_that_hides_nothing_is_one_line():
    with pytest.raises(GlassformerError, match="--window < --seq"):
        explain_part("window", {"seq": 4, "window": 4}, seed=0)
