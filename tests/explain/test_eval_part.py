"""`glassformer explain eval`: one ARC-Easy item scored step by step in both languages, its
numbers the evaluation harness's own (tasks/evaluate/), on the tiny model --ckpt names (SmolLM2,
the default when installed: tests/real/test_explain_eval_smollm2.py)."""
import json

import numpy as np
import pytest

from glassformer.cli import main
from glassformer.explain.core import LANGS
from glassformer.explain.parts import WALKTHROUGHS
from glassformer.explain.parts.eval import ITEM, SHOTS, prompt_text, tiny_model
from glassformer.io.pretrained import save_pretrained
from glassformer.ops.cross_entropy import log_softmax_forward
from glassformer.tasks.evaluate.encode import encode_pair
from glassformer.tasks.evaluate.prompts import example
from glassformer.tasks.evaluate.tasks_table import TASKS

KEYS = ["model", "prompt", "choices", "sums", "norm", "centred", "no_echo"]


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tiny")
    save_pretrained(tiny_model(), folder)
    return str(folder)


@pytest.mark.parametrize("lang", LANGS)
def test_eval_walks_the_item_in_both_languages(capsys, tiny_folder, lang):
    assert main(["explain", "eval", "--ckpt", tiny_folder, "--lang", lang]) == 0
    text = capsys.readouterr().out
    part = WALKTHROUGHS["eval"]
    assert part.text[lang]["title"] in text and ITEM.shared in text
    for number, key in enumerate(KEYS, start=1):
        assert f"[{number}] {key}" in text


def test_eval_numbers_are_each_sequence_scored_from_scratch(capsys, tiny_folder):
    assert main(["explain", "eval", "--ckpt", tiny_folder, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)["forward"]
    assert list(result) == KEYS
    spec = TASKS["arc_easy"]
    expected_prompt = "".join(example(spec, shot) + "\n" for shot in SHOTS)
    assert prompt_text() == expected_prompt + ITEM.shared + spec.delimiter
    model = tiny_model()
    for index, choice in enumerate(ITEM.options):   # the whole sequence, no cache
        request = encode_pair(model.tokenizer, prompt_text(), choice, model.context_len)
        logits, _ = model.forward(request.inputs[None])
        logp, _ = log_softmax_forward(logits[0].astype(np.float64))
        n = len(request.targets)
        picked = logp[np.arange(len(request.inputs) - n, len(request.inputs)), request.targets]
        np.testing.assert_allclose(result["sums"][index], picked.sum(), rtol=1e-5)
    sums = np.array(result["sums"])
    lengths = np.array([len(choice) for choice in ITEM.options])
    np.testing.assert_allclose(result["norm"], sums / lengths, rtol=1e-12)
    assert result["no_echo"] == [0.0, 0.0, 0.0, 0.0] and len(result["choices"]) == 4
    right = [float(np.argmax(sums) == ITEM.gold), float(np.argmax(sums / lengths) == ITEM.gold)]
    np.testing.assert_allclose(result["centred"], [(a - 0.25) / 0.75 for a in right])


def test_eval_has_no_backward_pass(capsys, tiny_folder):
    assert main(["explain", "eval", "--ckpt", tiny_folder, "--backward"]) == 2
    err = capsys.readouterr().err.strip()
    assert "no backward pass" in err and len(err.splitlines()) == 1

