"""Bad settings for `glassformer train` are one line and exit 2, and nothing is written."""
from pathlib import Path

import pytest

from glassformer.cli import main
from glassformer.train.runs.checks import training_memory_bytes
from glassformer.train.loop import TrainConfig
from glassformer.models.gpt2 import GPT2Config

TINY = ["--n-layer", "1", "--n-head", "2", "--d-model", "16", "--block-size", "8",
        "--batch-size", "2", "--eval-iters", "1", "--max-iters", "1", "--no-progress"]


@pytest.mark.parametrize("flags,message", [
    (["--out", ""], "--out must name a run folder, got an empty string"),
    (["--out", "  "], "--out must name a run folder"),
    (["--lr", "nan"], "--lr must be a finite number, got nan"),
    (["--lr", "inf"], "--lr must be a finite number, got inf"),
    (["--min-lr", "-1"], "--min-lr must be >= 0, got -1.0"),
    (["--grad-clip", "-1"], "--grad-clip must be >= 0, got -1.0"),
    (["--weight-decay", "-0.1"], "--weight-decay must be >= 0"),
    (["--beta2", "1"], "--beta2 must be in [0, 1), got 1.0"),
    (["--workers", "0"], "--workers must be at least 1, got 0"),
    (["--batch-size", "0"], "--batch-size must be at least 1, got 0"),
    (["--eval-interval", "0"], "--eval-interval must be at least 1"),
    (["--max-iters", "-1"], "--max-iters must be >= 0"),
    (["--warmup-iters", "500", "--lr-decay-iters", "400", "--max-iters", "1000"],
     "--warmup-iters 500 and --lr-decay-iters 400 were both given, and the cosine decay must "
     "end after the warmup"),
    (["--warmup-iters", "5", "--max-iters", "2"],
     "--warmup-iters 5 and --max-iters 2 were both given, and the warmup would be longer than "
     "the run"),
    (["--d-model", "1000000"], "would need about"),
    (["--n-layer", "3000", "--d-model", "2048"], "would need about"),
    (["--block-size", "100000000"], "would need about"),
    (["--n-head", "3"], "n_head=3 must divide d_model=16"),
    (["--allow-new-data"], "--allow-new-data only applies to --resume"),
    (["--resume", "--init", "gpt2"], "--init starts a new run and --resume continues one"),
])
def test_bad_setting_is_one_line_and_writes_nothing(tmp_path, monkeypatch, capsys, flags,
                                                    message):
    data = tmp_path / "data.txt"
    data.write_text("hello world, a short text to train on. " * 20, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    before = sorted(Path(tmp_path).iterdir())
    code = main(["train", "--data", str(data), "--out", "run", *TINY, *flags])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.count("\n") == 1 and message in err and "Traceback" not in err
    assert sorted(Path(tmp_path).iterdir()) == before  # no run folder, nothing in the cwd


def test_the_memory_estimate_names_parameters_and_need(tmp_path, capsys):
    data = tmp_path / "data.txt"
    data.write_text("abc " * 100, encoding="utf-8")
    assert main(["train", "--data", str(data), "--out", str(tmp_path / "r"), *TINY,
                 "--d-model", "1000000"]) == 2
    err = capsys.readouterr().err
    assert "parameters: n_layer=1, d_model=1000000" in err and "this machine has" in err


def test_memory_estimate_counts_the_four_copies_of_the_params():
    cfg = GPT2Config(vocab_size=10, max_seq_len=8, n_layer=1, n_head=2, d_model=16)
    need, n_params = training_memory_bytes(cfg, TrainConfig(batch_size=1, block_size=8))
    assert n_params == 10 * 16 + 8 * 16 + 12 * 16 * 16 + 4 * 16 + 16 * 4 + 5 * 16 + 2 * 16
    assert need > 4 * 4 * n_params
