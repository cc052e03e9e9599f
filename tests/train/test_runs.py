"""Runs that cannot be lost: --resume continues the run as it was, one writer per run folder,
Ctrl-C checkpoints the iteration it is at, a changed data file is noticed."""
import os
import signal
import subprocess
import sys
import time

import pytest

from glassformer.cli import main
from glassformer.io.checkpoint import load_checkpoint, read_train_log
from glassformer.io.pretrained import load_pretrained
from glassformer.train.runs.folder import saved_train_config

TINY_MODEL = ["--n-layer", "1", "--n-head", "2", "--d-model", "16", "--eval-iters", "2",
              "--no-progress", "--workers", "1"]
# Every setting away from its default, so a resume that fell back to a default would show.
ODD_SETTINGS = ["--lr", "0.003", "--min-lr", "0.0002", "--batch-size", "3", "--block-size", "12",
                "--warmup-iters", "1", "--lr-decay-iters", "30", "--weight-decay", "0.05",
                "--beta1", "0.8", "--beta2", "0.95", "--grad-clip", "0.5", "--seed", "7",
                "--eval-interval", "4"]
SECOND_TRAINER_EXITS_S = 20  # generous on a loaded 2-core machine; it exits at startup


def train_losses(run_dir):
    return {r["iter"]: r["train_loss"] for r in read_train_log(run_dir) if "train_loss" in r}


def val_losses(run_dir):
    return {r["iter"]: r["val_loss"] for r in read_train_log(run_dir) if "val_loss" in r}


def trainer(corpus, out, *extra):
    """A `glassformer train` subprocess on the tiny model, with stderr captured."""
    cmd = [sys.executable, "-m", "glassformer", "train", "--data", str(corpus), *TINY_MODEL,
           "--block-size", "16", "--batch-size", "4", "--out", str(out), *extra]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def wait_for(condition, timeout_s=60.0):
    deadline = time.time() + timeout_s
    while not condition():
        assert time.time() < deadline, "timed out"
        time.sleep(0.05)


def test_resume_with_only_max_iters_keeps_every_setting(corpus, tmp_path):
    straight, split = tmp_path / "straight", tmp_path / "split"
    common = ["train", "--data", str(corpus), *TINY_MODEL, *ODD_SETTINGS]
    assert main([*common, "--out", str(straight), "--max-iters", "10"]) == 0
    assert main([*common, "--out", str(split), "--max-iters", "4"]) == 0  # an eval iteration
    assert main(["train", "--out", str(split), "--resume", "--max-iters", "10"]) == 0
    assert sorted(train_losses(straight)) == list(range(10))
    assert train_losses(split) == train_losses(straight)  # bit for bit
    assert val_losses(split) == val_losses(straight)
    saved = load_checkpoint(split).state["train_config"]
    assert saved == load_checkpoint(straight).state["train_config"]
    assert saved["lr"] == 0.003 and saved["batch_size"] == 3 and saved["seed"] == 7
    assert saved_train_config(split).workers == 1 and saved_train_config(split).lr == 0.003


@pytest.mark.parametrize("flag,value,message", [
    ("--lr", "0.01", "it has --lr 0.003, got --lr 0.01"),
    ("--batch-size", "4", "it has --batch-size 3, got --batch-size 4"),
    ("--block-size", "16", "it has --block-size 12, got --block-size 16"),
    ("--seed", "8", "it has --seed 7, got --seed 8"),
    ("--d-model", "32", "its d_model is 16, got --d-model 32"),
    ("--arch", "llama", "its arch is gpt2, got --arch llama"),
])
def test_resume_refuses_a_change_that_breaks_the_run(corpus, tmp_path, capsys, flag, value,
                                                     message):
    out = tmp_path / "run"
    assert main(["train", "--data", str(corpus), *TINY_MODEL, *ODD_SETTINGS, "--out", str(out),
                 "--max-iters", "2"]) == 0
    capsys.readouterr()
    assert main(["train", "--out", str(out), "--resume", flag, value]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err
    assert load_checkpoint(out).state["iter"] == 2


def test_resume_takes_safe_changes_and_logs_them(corpus, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", "--data", str(corpus), *TINY_MODEL, *ODD_SETTINGS, "--out", str(out),
                 "--max-iters", "2"]) == 0
    assert main(["train", "--out", str(out), "--resume", "--max-iters", "3", "--min-lr", "1e-5",
                 "--lr-decay-iters", "50", "--eval-interval", "3", "--lr", "0.003"]) == 0
    err = capsys.readouterr().err
    assert "--min-lr 1e-05 (the run had 0.0002)" in err
    saved = load_checkpoint(out).state["train_config"]
    assert (saved["min_lr"], saved["lr_decay_iters"], saved["lr"]) == (1e-5, 50, 0.003)
    logged = [r for r in read_train_log(out) if "resumed_with" in r]
    assert logged[0]["iter"] == 2 and logged[0]["resumed_with"]["max_iters"] == [2, 3]


def test_a_changed_data_file_is_refused_unless_allowed(corpus, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", "--data", str(corpus), *TINY_MODEL, "--out", str(out),
                 "--max-iters", "1"]) == 0
    corpus.write_text(corpus.read_text(encoding="utf-8")[:15_000], encoding="utf-8")
    capsys.readouterr()
    assert main(["train", "--out", str(out), "--resume", "--max-iters", "2"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "changed since the run started (20,000 -> 15,000" in err
    other = tmp_path / "other.txt"
    other.write_text(corpus.read_text(encoding="utf-8"), encoding="utf-8")
    assert main(["train", "--out", str(out), "--resume", "--data", str(other)]) == 2
    assert "pass --allow-new-data" in capsys.readouterr().err
    assert main(["train", "--out", str(out), "--resume", "--max-iters", "2",
                 "--allow-new-data"]) == 0
    assert load_checkpoint(out).state["iter"] == 2
    assert main(["train", "--out", str(out), "--resume", "--max-iters", "3"]) == 0  # recorded


def test_a_second_trainer_on_the_same_folder_exits_naming_the_first(corpus, tmp_path):
    out = tmp_path / "run"
    first = trainer(corpus, out, "--max-iters", "200", "--eval-interval", "100")
    wait_for(lambda: (out / "train_log.jsonl").is_file())
    first.send_signal(signal.SIGSTOP)  # paused, still holding the folder: no race with its end
    try:
        second = trainer(corpus, out, "--max-iters", "5")
        resume = trainer(corpus, out, "--resume", "--max-iters", "5")
        for proc in (second, resume):
            _, err = proc.communicate(timeout=SECOND_TRAINER_EXITS_S)
            assert proc.returncode == 2
            assert err.count("\n") == 1 and f"(pid {first.pid})" in err
    finally:
        first.send_signal(signal.SIGCONT)
    first.communicate(timeout=120)
    assert first.returncode == 0
    assert sorted(train_losses(out)) == list(range(200))  # each iteration once: the first run
    assert load_checkpoint(out).state["iter"] == 200
    assert load_pretrained(out).arch == "gpt2"


def test_a_killed_holder_leaves_no_stale_lock(corpus, tmp_path):
    out = tmp_path / "run"
    first = trainer(corpus, out, "--max-iters", "100000", "--eval-interval", "3")
    wait_for(lambda: (out / "latest").is_file())
    first.kill()  # SIGKILL: no handler runs, the kernel drops the lock
    first.communicate(timeout=30)
    at = load_checkpoint(out).state["iter"]
    assert main(["train", "--out", str(out), "--resume", "--max-iters", str(at + 2)]) == 0
    assert load_checkpoint(out).state["iter"] == at + 2


def test_sigint_checkpoints_the_iteration_and_resume_is_exact(corpus, tmp_path):
    stopped, straight = tmp_path / "stopped", tmp_path / "straight"
    # the warmup typed for both runs: a straight run of a few iterations would otherwise warm
    # up for a tenth of its own length (train/runs/defaults.py), not the stopped run's default
    proc = trainer(corpus, stopped, "--max-iters", "100000", "--eval-interval", "1000",
                   "--warmup-iters", "2")
    wait_for(lambda: len(train_losses(stopped)) >= 5)
    os.kill(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130
    at = load_checkpoint(stopped).state["iter"]
    assert at % 1000 != 0 and sorted(train_losses(stopped)) == list(range(at))
    assert f"stopped by SIGINT at iteration {at}" in err and "--resume" in err
    assert main(["train", "--out", str(stopped), "--resume", "--max-iters", str(at + 3)]) == 0
    assert main(["train", "--data", str(corpus), *TINY_MODEL, "--block-size", "16",
                 "--batch-size", "4", "--out", str(straight), "--max-iters", str(at + 3),
                 "--eval-interval", "1000", "--warmup-iters", "2", "--lr-decay-iters", "2000"]) == 0
    assert train_losses(stopped) == train_losses(straight)


def test_sigterm_checkpoints_too(corpus, tmp_path):
    out = tmp_path / "run"
    proc = trainer(corpus, out, "--max-iters", "100000", "--eval-interval", "1000")
    wait_for(lambda: len(train_losses(out)) >= 3)
    proc.terminate()
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143 and "stopped by SIGTERM" in err
    assert load_checkpoint(out).state["iter"] == len(train_losses(out))
