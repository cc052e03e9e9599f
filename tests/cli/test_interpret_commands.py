"""`glassformer patch`, `attribute` and `heads` on a small character-level run trained by
`glassformer train`: their tables, --json, and the one-line refusals."""
import json
from pathlib import Path

import pytest

from glassformer.cli import main

SHAKESPEARE = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "tinyshakespeare.txt"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    if not SHAKESPEARE.is_file():
        pytest.skip(f"corpus {SHAKESPEARE} is absent")
    root = tmp_path_factory.mktemp("run")
    corpus = root / "corpus.txt"
    corpus.write_text(SHAKESPEARE.read_text(encoding="utf-8")[:20_000], encoding="utf-8")
    out = root / "run"
    assert main(["train", "--data", str(corpus), "--out", str(out), "--n-layer", "2",
                 "--n-head", "2", "--d-model", "16", "--block-size", "32", "--batch-size", "4",
                 "--max-iters", "3", "--eval-interval", "3", "--eval-iters", "1",
                 "--no-progress"]) == 0
    return str(out)


def test_patch_prints_a_table_and_json(run_dir, capsys):
    args = ["patch", "--model", run_dir, "--clean", "the king", "--corrupt", "the kinf",
            "--target", "e", "--other", "a", "--kinds", "resid_pre,z"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "resid_pre: layers x positions, peak" in out and "z: layers x heads" in out
    assert main(args + ["--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert len(payload["tables"]["resid_pre"]["normalised"]) == 2
    assert len(payload["tables"]["resid_pre"]["normalised"][0]) == len("the king")
    assert main(args + ["--attribution", "--json"]) == 0
    assert "resid_pre" in json.loads(capsys.readouterr().out)["tables"]


def test_attribute_and_heads(run_dir, capsys):
    assert main(["attribute", "--model", run_dir, "--prompt", "the kin", "--target", "g",
                 "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert abs(payload["total"] - payload["logit"]) <= 1e-5 * max(abs(payload["logit"]), 1)
    assert "L1H1" in payload["terms"]
    assert main(["heads", "--model", run_dir, "--kind", "all", "--seq-len", "8"]) == 0
    out = capsys.readouterr().out
    assert "induction scores, layers x heads" in out and "previous_token scores" in out


def test_bad_input_is_one_line(run_dir, capsys):
    base = ["patch", "--model", run_dir, "--target", "e", "--other", "a"]
    assert main(base + ["--clean", "the king", "--corrupt", "a king"]) == 2
    assert "the clean one has 8 tokens, the corrupted one 6" in capsys.readouterr().err
    assert main(["attribute", "--model", run_dir, "--prompt", "the", "--target", "ee"]) == 2
    assert "--target 'ee' is 2 tokens" in capsys.readouterr().err
    assert main(["heads", "--model", run_dir, "--seq-len", "8", "--max-cache-mb",
                 "0.0001"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--max-cache-mb" in err


def test_heads_past_the_context_names_the_longest_copy_that_fits(run_dir, capsys):
    assert main(["heads", "--model", run_dir]) == 2            # ARENA's 50 tokens; the context is 32
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "1 + 2 x 50 = 101 tokens" in err and "at most 15" in err
    assert main(["heads", "--model", run_dir, "--seq-len", "15"]) == 0
