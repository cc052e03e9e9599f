"""`glassformer sae train` and `sae eval` on a tiny random LLaMA: the folder is written in
SAELens's format with the metrics, `eval` reads it back with the same numbers, and bad input is
one line with nothing written."""
import json

import numpy as np
import pytest

from glassformer.cli import main
from glassformer.interpret.sae.saelens_folder import load_sae
from glassformer.io.pretrained import save_pretrained
from glassformer.models import llama
from glassformer.models.model import Model
from glassformer.tokenizers.bpe import BPETokenizer

SMALL = ["--data", "tinyshakespeare", "--tokens", "1024", "--eval-tokens", "128",
         "--context", "32", "--steps", "20", "--batch", "64", "--expansion", "2"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    folder = tmp_path_factory.mktemp("llama")
    cfg = llama.LlamaConfig(vocab_size=256, n_layer=2, n_head=2, d_model=8, d_ff=16,
                            max_seq_len=64)
    tokenizer = BPETokenizer({bytes([b]): b for b in range(256)}, [])
    save_pretrained(Model(cfg, llama.init_params(cfg, np.random.default_rng(0)), tokenizer),
                    folder)
    return str(folder)


@pytest.mark.parametrize("arch", [["--arch", "relu", "--l1", "2"], ["--arch", "topk", "--k", "3"]])
def test_train_then_eval(model_dir, tmp_path, capsys, arch):
    out = tmp_path / "sae"
    assert main(["sae", "train", "--model", model_dir, "--hook", "blocks.0.hook_resid_post",
                 "--out", str(out), "--json", *SMALL, *arch]) == 0
    report = json.loads(capsys.readouterr().out)
    metrics = report["eval"]
    assert set(metrics) >= {"explained_variance", "l0", "ce_loss_recovered", "dead_on_eval"}
    params, cfg, metadata = load_sae(out)
    assert cfg.d_sae == 16 and metadata["hook_name"] == "blocks.0.hook_resid_post"
    assert metadata["glassformer"]["eval"] == metrics
    assert main(["sae", "eval", "--model", model_dir, "--sae", str(out), "--data",
                 "tinyshakespeare", "--eval-tokens", "128", "--context", "32", "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["hook"] == "blocks.0.hook_resid_post" and again["positions"] > 0
    # --skip-tokens at train's --tokens: the very positions train's report measured
    assert main(["sae", "eval", "--model", model_dir, "--sae", str(out), "--data",
                 "tinyshakespeare", "--eval-tokens", "128", "--context", "32",
                 "--skip-tokens", "1024", "--json"]) == 0
    held_out = json.loads(capsys.readouterr().out)
    for name in ("explained_variance", "l0", "ce_clean", "ce_sae", "ce_zero"):
        assert held_out[name] == pytest.approx(metrics[name], rel=1e-5), name
    assert main(["sae", "eval", "--model", model_dir, "--sae", str(out), "--data",
                 "tinyshakespeare", "--eval-tokens", "128", "--context", "32"]) == 0
    assert "CE loss recovered" in capsys.readouterr().out


@pytest.mark.parametrize("flags, message", [
    (["--hook", "blocks.0.hook_z"], "unknown hook name"),
    (["--hook", "blocks.5.hook_resid_post"], "unknown hook name"),
    (["--hook", "blocks.0.attn.hook_pattern"], "one vector per position"),
    (["--hook", "blocks.0.hook_resid_post", "--arch", "topk", "--k", "99"], "1 <= k <= d_sae"),
    (["--hook", "blocks.0.hook_resid_post", "--tokens", "99999999"], "lower --tokens"),
    (["--hook", "blocks.0.hook_resid_post", "--steps", "0"], "--steps must be >= 1"),
])
def test_bad_input_is_one_line_and_writes_nothing(model_dir, tmp_path, capsys, flags, message):
    out = tmp_path / "sae"
    args = ["sae", "train", "--model", model_dir, "--out", str(out), *SMALL, *flags]
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
    assert not out.exists()


def test_an_out_path_that_is_a_file_is_refused(model_dir, tmp_path, capsys):
    (tmp_path / "taken").write_text("x")
    assert main(["sae", "train", "--model", model_dir, "--hook", "blocks.0.hook_resid_post",
                 "--out", str(tmp_path / "taken"), *SMALL]) == 2
    assert "not an SAE folder" in capsys.readouterr().err
