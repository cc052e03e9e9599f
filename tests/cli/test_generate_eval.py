"""`glassformer generate`, `eval` and `convert` on a tiny trained run (a run folder is a model)."""
import fcntl
import json
import math
import os
import pty
import select
import struct
import subprocess
import sys
import termios
from pathlib import Path

import numpy as np
import pytest

from glassformer.cli import main
from glassformer.io.pretrained import load_pretrained
from glassformer.ops.cross_entropy import cross_entropy_forward

SHAKESPEARE = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "tinyshakespeare.txt"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    if not SHAKESPEARE.is_file():
        pytest.skip(f"corpus {SHAKESPEARE} is absent")
    root = tmp_path_factory.mktemp("run")
    corpus = root / "corpus.txt"
    corpus.write_text(SHAKESPEARE.read_text(encoding="utf-8")[:20_000], encoding="utf-8")
    out = root / "run"
    assert main(["train", "--data", str(corpus), "--out", str(out), "--n-layer", "1",
                 "--n-head", "2", "--d-model", "16", "--block-size", "16", "--batch-size", "4",
                 "--max-iters", "3", "--eval-interval", "3", "--eval-iters", "1",
                 "--no-progress"]) == 0
    return out, corpus


def test_generate_echo_streams_prompt_and_continuation(run_dir, capsys):
    # nanoGPT's sample.py: the prompt, then its continuation, sampled with top-k
    out, _ = run_dir
    argv = ["generate", "--model", str(out), "--echo", "--top-k", "200", "--max-new-tokens", "20",
            "--seed", "3", "ROMEO:"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("ROMEO:") and len(captured.out) == len("ROMEO:") + 20 + 1
    assert "tokens/s" in captured.err
    assert main(argv) == 0
    assert capsys.readouterr().out == captured.out  # same seed, same text


def test_generate_without_a_prompt_continues_a_newline(run_dir, capsys):
    out, _ = run_dir
    assert main(["generate", "--model", str(out), "--echo", "--max-new-tokens", "4"]) == 0
    captured = capsys.readouterr().out
    assert captured.startswith("\n") and len(captured) == 1 + 4 + 1


def test_generate_with_unseen_character_is_a_clear_error(run_dir, capsys):
    out, _ = run_dir
    assert main(["generate", "--model", str(out), "汉字"]) == 2
    assert "'汉' (U+6C49" in capsys.readouterr().err


def test_prompt_longer_than_context_slides_the_window(run_dir, capsys):
    out, _ = run_dir
    long_prompt = "To be, or not to be, that is the question: " * 2  # > 16 chars of context
    assert main(["generate", "--model", str(out), "--echo", "--max-new-tokens", "5", "--no-cache",
                 long_prompt]) == 0
    assert capsys.readouterr().out.startswith(long_prompt)


def test_eval_reports_loss_and_perplexity(run_dir, capsys):
    out, corpus = run_dir
    assert main(["eval", "--model", str(out), "--data", str(corpus), "--json", "--split",
                 "all"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["perplexity"] == pytest.approx(math.exp(result["loss"]))
    model = load_pretrained(out)
    ids = np.array(model.tokenizer.encode(corpus.read_text(encoding="utf-8")))
    n = (len(ids) - 1) // 16
    logits = model(ids[:n * 16].reshape(n, 16))
    loss, _ = cross_entropy_forward(logits, ids[1:n * 16 + 1].reshape(n, 16))
    assert result["loss"] == pytest.approx(float(loss), rel=1e-5)
    assert result["tokens"] == n * 16


def test_convert_writes_a_folder_transformers_loads(run_dir, tmp_path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    out, _ = run_dir
    assert main(["convert", "--model", str(out), "--out", str(tmp_path / "hf")]) == 0
    hf = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "hf")
    ids = np.array([[1, 2, 3, 4, 5, 6]])
    with torch.no_grad():
        theirs = hf(torch.from_numpy(ids)).logits.numpy()
    np.testing.assert_allclose(load_pretrained(out)(ids), theirs, atol=1e-5)


def test_eval_says_what_it_scored_and_is_quiet_when_piped(run_dir, capsys):
    out, corpus = run_dir
    assert main(["eval", "--model", str(out), "--data", str(corpus), "--split", "all"]) == 0
    captured = capsys.readouterr()
    assert "of " + str(corpus) + ": the whole file" in captured.out
    assert captured.err == ""  # stderr is not a terminal here: no progress bar
    assert main(["eval", "--model", str(out), "--data", str(corpus)]) == 0  # val by default
    assert "its val split (the last 10% of the tokens" in capsys.readouterr().out


def test_eval_val_split_scores_the_last_tenth(run_dir, capsys):
    out, corpus = run_dir
    assert main(["eval", "--model", str(out), "--data", str(corpus), "--json", "--split",
                 "all"]) == 0
    whole = json.loads(capsys.readouterr().out)
    assert main(["eval", "--model", str(out), "--data", str(corpus), "--json", "--split",
                 "val"]) == 0
    val = json.loads(capsys.readouterr().out)
    assert whole["split"] == "all" and val["split"] == "val"
    n_ids = len(load_pretrained(out).tokenizer.encode(corpus.read_text(encoding="utf-8")))
    n_val = n_ids - int(n_ids * 0.9)
    assert val["tokens"] == (n_val - 1) // 16 * 16


def test_eval_batch_size_zero_is_one_line(run_dir, capsys):
    out, corpus = run_dir
    assert main(["eval", "--model", str(out), "--data", str(corpus), "--batch-size", "0"]) == 2
    assert "batch size and block size must be at least 1" in capsys.readouterr().err


def test_eval_shows_a_progress_bar_on_a_terminal(run_dir):
    """stderr on a pseudo-terminal (with a size: tqdm draws nothing 0 columns wide)."""
    out, corpus = run_dir
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    proc = subprocess.Popen([sys.executable, "-m", "glassformer", "eval", "--model", str(out),
                             "--data", str(corpus), "--batch-size", "64", "--split", "all"],
                            stdout=subprocess.DEVNULL, stderr=slave)
    os.close(slave)
    shown = b""
    while select.select([master], [], [], 60)[0]:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        shown += chunk
    assert proc.wait(timeout=60) == 0
    assert b"eval: 100%" in shown and b"window" in shown
