"""The seed's worked example, reproduced by `glassformer attention` (forward, backward, JSON)."""
import json

import numpy as np
import pytest

from glassformer.cli import main
from glassformer.explain.core import LANGS
from glassformer.explain.parts.attention import TEXT

# The seed prints 4 decimals; 1e-4 is the bar for matching them.
SEED_ATOL = 1e-4
# A correct float64 backward matches central differences to ~1e-9.
FD_TOL = 1e-6

# Values printed by the seed tutorial (§1.2), causal attention.
SEED = {
    "Q": [[0.01, 0.07], [0.11, 0.05], [-0.01, 0.01]],
    "K": [[0.07, 0.07], [0.11, 0.05], [0.0, 0.01]],
    "V": [[0.05, 0.07], [0.07, 0.05], [-0.01, 0.03]],
    "masked_scores": [[3.9598e-03, -1e9, -1e9],
                      [7.9196e-03, 1.0324e-02, -1e9],
                      [1.3632e-11, -4.2426e-04, 7.0711e-05]],
    "weights": [[1.0, 0.0, 0.0], [0.4994, 0.5006, 0.0], [0.3334, 0.3332, 0.3334]],
    "output": [[0.05, 0.07], [0.06, 0.06], [0.0367, 0.05]],
}

FORWARD_KEYS = ["X", "Wq", "Wk", "Wv", "Q", "K", "V", "scale", "scores", "mask",
                "masked_scores", "weights", "output"]
BACKWARD_KEYS = ["G", "dweights", "dscores", "dQ", "dK", "dV", "dWq", "dWk", "dWv", "dX"]


def run_json(capsys, *argv):
    assert main(["attention", "--json", *argv]) == 0
    return json.loads(capsys.readouterr().out)


def test_json_reproduces_the_seed(capsys):
    result = run_json(capsys)
    for key, expected in SEED.items():
        np.testing.assert_allclose(np.array(result[key])[0], expected, atol=SEED_ATOL,
                                   err_msg=key)
    assert result["scale"] == pytest.approx(1.0 / np.sqrt(2.0))


def test_causal_weights_are_exactly_zero_above_the_diagonal(capsys):
    weights = np.array(run_json(capsys)["weights"])[0]
    assert np.all(weights[np.triu_indices(3, k=1)] == 0.0)
    np.testing.assert_allclose(weights.sum(axis=-1), 1.0, rtol=1e-6)


def test_bidirectional_has_no_zero_weights_and_same_last_row(capsys):
    causal = np.array(run_json(capsys)["weights"])[0]
    bidirectional = run_json(capsys, "--bidirectional")
    weights = np.array(bidirectional["weights"])[0]
    assert np.all(np.array(bidirectional["mask"]))
    assert np.all(weights > 0.0)
    np.testing.assert_allclose(weights[2], causal[2], atol=1e-7)


def test_json_has_every_stable_key_and_backward_passes_the_check(capsys):
    result = run_json(capsys, "--backward")
    assert set(FORWARD_KEYS + BACKWARD_KEYS) <= set(result)
    assert result["max_rel_err"] < FD_TOL
    dscores = np.array(result["dscores"])[0]
    assert np.all(dscores[np.triu_indices(3, k=1)] == 0.0)


def test_backward_numbers_are_the_attention_gradients(capsys):
    result = run_json(capsys, "--backward")
    weights, v = np.array(result["weights"]), np.array(result["V"])
    grad = np.array(result["G"])
    np.testing.assert_allclose(result["dV"], np.swapaxes(weights, -1, -2) @ grad, rtol=1e-6)
    np.testing.assert_allclose(result["dweights"], grad @ np.swapaxes(v, -1, -2), rtol=1e-6)


def test_random_inputs_of_any_size(capsys):
    result = run_json(capsys, "--seed", "3", "--seq", "5", "--d-model", "8", "--d-k", "4",
                      "--batch", "2", "--backward", "--grad", "random")
    assert np.array(result["X"]).shape == (2, 5, 8)
    assert np.array(result["weights"]).shape == (2, 5, 5)
    assert np.array(result["dX"]).shape == (2, 5, 8)
    assert result["max_rel_err"] < FD_TOL
    again = run_json(capsys, "--seed", "3", "--seq", "5", "--d-model", "8", "--d-k", "4",
                     "--batch", "2", "--backward", "--grad", "random")
    assert again == result


@pytest.mark.parametrize("lang", LANGS)
def test_prose_in_both_languages(capsys, lang):
    assert main(["attention", "--backward", "--lang", lang]) == 0
    text = capsys.readouterr().out
    assert TEXT[lang]["forward"] in text and TEXT[lang]["backward"] in text
    assert "(1,3,2) @ (1,2,3) -> (1,3,3)" in text
    assert "0.4994" in text and "0.0367" in text


def test_every_text_key_exists_in_both_languages():
    assert set(TEXT["en"]) == set(TEXT["zh"])


def test_compare_shows_what_changed(capsys):
    assert main(["attention", "--compare", "--lang", "en"]) == 0
    text = capsys.readouterr().out
    assert "Causal vs bidirectional" in text
    assert "[0, 1]" in text  # rows 0 and 1 changed; the last row did not


def test_locale_picks_chinese(monkeypatch, capsys):
    monkeypatch.setenv("LC_ALL", "zh_CN.UTF-8")
    assert main(["attention"]) == 0
    assert TEXT["zh"]["forward"] in capsys.readouterr().out


@pytest.mark.parametrize("lang", LANGS)
def test_the_seed_is_one_explain_part_among_the_others(capsys, lang):
    assert main(["attention", "--backward", "--lang", lang]) == 0
    front_door = capsys.readouterr().out
    assert main(["explain", "attention", "--backward", "--lang", lang]) == 0
    assert front_door == capsys.readouterr().out + "\n"   # the front door prints one more line


def test_explain_attention_json_holds_the_seed_numbers_and_the_check(capsys):
    assert main(["explain", "attention", "--backward", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    np.testing.assert_allclose(np.array(result["forward"]["weights"])[0], SEED["weights"],
                               atol=SEED_ATOL)
    assert result["check"]["ok"] and set(result["check"]["rel_err"]) == {"X", "Wq", "Wk", "Wv"}


def test_explain_attention_takes_the_front_doors_mask_and_sizes(capsys):
    assert main(["explain", "attention", "--bidirectional", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["options"]["bidirectional"] is True
    assert np.all(np.array(result["forward"]["mask"]))
    random = run_json(capsys, "--seed", "0", "--seq", "4")
    assert main(["explain", "attention", "--seq", "4", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["forward"]["X"] == random["X"]
