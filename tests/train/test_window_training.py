"""`glassformer train --attention window --window W`: a LLaMA run whose every layer slides a
window, resumed bit for bit, exported as a Mistral folder transformers loads with the same
logits; the refusals in one line."""
import json

import numpy as np
import pytest

from glassformer.cli import main
from glassformer.io.checkpoint import read_train_log
from glassformer.io.pretrained import load_pretrained

TINY = ["--arch", "llama", "--n-layer", "2", "--n-head", "2", "--d-model", "16",
        "--eval-iters", "2", "--no-progress", "--block-size", "24", "--batch-size", "4",
        "--eval-interval", "3", "--workers", "1", "--attention", "window", "--window", "5"]


def test_windowed_run_resumes_bit_for_bit_and_loads_with_its_window(corpus, tmp_path):
    straight, split = tmp_path / "straight", tmp_path / "split"
    common = ["train", "--data", str(corpus), *TINY]
    assert main([*common, "--out", str(straight), "--max-iters", "6"]) == 0
    assert main([*common, "--out", str(split), "--max-iters", "3"]) == 0
    assert main(["train", "--out", str(split), "--resume", "--max-iters", "6",
                 "--no-progress"]) == 0
    losses = [{r["iter"]: r["train_loss"] for r in read_train_log(run) if "train_loss" in r}
              for run in (straight, split)]
    assert losses[0] == losses[1]
    model = load_pretrained(straight)
    assert model.cfg.sliding_window == 5 and model.cfg.full_layers == ()


@pytest.mark.slow
def test_windowed_run_exports_as_mistral_with_the_same_logits(corpus, tmp_path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    run, folder = tmp_path / "run", tmp_path / "hf"
    assert main(["train", "--data", str(corpus), *TINY, "--out", str(run),
                 "--max-iters", "3"]) == 0
    assert main(["convert", "--model", str(run), "--out", str(folder)]) == 0
    assert json.loads((folder / "config.json").read_text())["sliding_window"] == 5
    reference = transformers.AutoModelForCausalLM.from_pretrained(folder).eval()
    ids = np.arange(1, 19)[None] % 20                       # 18 tokens: past the window
    with torch.no_grad():
        expected = reference(torch.from_numpy(ids)).logits.numpy()
    np.testing.assert_allclose(load_pretrained(run)(ids), expected, atol=1e-4)


@pytest.mark.parametrize("flags, message", [
    (["--attention", "window", "--window", "5"], "needs --arch llama or moe"),
    (["--arch", "llama", "--attention", "window"], "needs --window W >= 1"),
    (["--arch", "llama", "--attention", "window", "--window", "0"], "needs --window W >= 1"),
    (["--arch", "llama", "--window", "5"], "--window applies to --attention window only"),
])
def test_bad_window_settings_say_one_line_and_write_nothing(corpus, tmp_path, capsys, flags,
                                                           message):
    out = tmp_path / "run"
    assert main(["train", "--data", str(corpus), "--max-iters", "1", "--out", str(out),
                 *flags]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()
