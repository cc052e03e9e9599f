"""`glassformer train --arch transformer` end to end on a tiny TSV: a run that learns to reverse
short words, resume exactness, `glassformer translate` on the run, and the bad inputs."""
import pytest

from glassformer.cli import main
from glassformer.io.checkpoint import load_checkpoint, read_train_log
from glassformer.io.pretrained import load_pretrained

TINY = ["--arch", "transformer", "--n-layer", "1", "--n-head", "2", "--d-model", "32",
        "--dropout", "0.0", "--batch-size", "16", "--eval-iters", "2", "--eval-interval", "10",
        "--warmup-iters", "1", "--lr", "0.005", "--no-progress", "--workers", "1"]
WORDS = [a + b + c + d for a in "abcde" for b in "abcde" for c in "abcde" for d in "abcde"]  # 625


@pytest.fixture
def reversal(tmp_path):
    path = tmp_path / "rev.tsv"
    path.write_text("".join(f"{w}\t{w[::-1]}\n" for w in WORDS), encoding="utf-8")
    return path


def train_losses(run):
    return {r["iter"]: r["train_loss"] for r in read_train_log(run) if "train_loss" in r}


def test_train_resume_and_translate(reversal, tmp_path, capsys):
    straight, split = tmp_path / "straight", tmp_path / "split"
    common = ["train", "--data", str(reversal), *TINY]
    assert main([*common, "--out", str(straight), "--max-iters", "30",
                 "--lr-decay-iters", "30"]) == 0
    assert main([*common, "--out", str(split), "--max-iters", "20", "--lr-decay-iters", "30"]) == 0
    assert main(["train", "--out", str(split), "--resume", "--max-iters", "30"]) == 0
    assert train_losses(split) == train_losses(straight)          # resume is exact
    state = load_checkpoint(straight).state["train_config"]
    assert state["objective"] == "seq2seq" and state["label_smoothing"] == 0.1
    model = load_pretrained(straight)
    assert model.arch == "transformer"
    losses = train_losses(straight)
    assert losses[29] < 0.6 * losses[0]                           # it learns
    capsys.readouterr()
    assert main(["translate", "--model", str(straight), "--beam", "3", "abcd", "dcab"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and all(set(line) <= set("abcde") for line in lines)


def test_bad_inputs_are_one_line(reversal, tmp_path, capsys):
    bad = tmp_path / "bad.tsv"
    bad.write_text("ab\tba\nno tab\n", encoding="utf-8")
    assert main(["train", "--data", str(bad), *TINY, "--out", str(tmp_path / "r")]) == 2
    assert "line 2 has no tab" in capsys.readouterr().err
    run = tmp_path / "run"
    assert main(["train", "--data", str(reversal), *TINY, "--out", str(run),
                 "--max-iters", "1"]) == 0
    capsys.readouterr()
    assert main(["translate", "--model", str(run), "--beam", "0", "abcd"]) == 2
    assert "--beam must be at least 1" in capsys.readouterr().err
    assert main(["translate", "--model", str(run), "abcdabcdabcd"]) == 2
    err = capsys.readouterr().err
    assert "longer than the model's context" in err and len(err.strip().splitlines()) == 1
    for command in (["generate", "--model", str(run), "abcd"],
                    ["eval", "--model", str(run), "--data", str(reversal)]):
        assert main(command) == 2
        err = capsys.readouterr().err
        assert "encoder-decoder" in err and len(err.strip().splitlines()) == 1
