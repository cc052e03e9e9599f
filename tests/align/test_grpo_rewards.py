"""GRPO rewards on a real run (issue 49): a reward function's NaN or infinity stops the run in one
line naming the function and the completion, before or during training; a function that cannot
score (None) leaves its metrics null in a strict-JSON log, named in the line's "nonfinite"."""
import json

import pytest

from align_fixtures import FAST, GRPO_FLAGS, LORA, prompt_records, write_jsonl
from glassformer.cli import main

REWARDS = """
import math

def always_nan(prompts, completions, **columns):
    return [math.nan for _ in completions]

def inf_once_written(prompts, completions, **columns):   # the probe's empty completions pass
    return [math.inf if c[0]["content"] else 0.0 for c in completions]

def cannot_score(prompts, completions, **columns):
    return [None for _ in completions]
"""


def strict_rows(run_dir):
    def refuse(token):
        raise AssertionError(f"non-standard JSON token {token}")
    lines = (run_dir / "train_log.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line, parse_constant=refuse) for line in lines]


def grpo(tiny_base, tmp_path, reward):
    (tmp_path / "rewards.py").write_text(REWARDS, encoding="utf-8")
    data = write_jsonl(tmp_path / "prompts.jsonl", prompt_records())
    flags = [*GRPO_FLAGS, "--reward", reward.replace("R:", f"{tmp_path / 'rewards.py'}:")]
    return main(["finetune", "--model", str(tiny_base), "--data", str(data),
                 "--out", str(tmp_path / "run"), *FAST, *LORA, *flags, "--batch-size", "2"])


def test_a_nan_reward_is_refused_before_anything_is_written(tiny_base, tmp_path, capsys):
    assert grpo(tiny_base, tmp_path, "R:always_nan") == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1
    assert "reward function always_nan returned nan for completion ''" in err
    assert not (tmp_path / "run").exists()


def test_an_infinite_reward_mid_run_stops_it_in_one_line(tiny_base, tmp_path, capsys):
    assert grpo(tiny_base, tmp_path, "R:inf_once_written") == 2
    err = capsys.readouterr().err.splitlines()
    assert len([line for line in err if "error" in line]) == 1
    assert "reward function inf_once_written returned inf for completion '" in err[-1]
    strict_rows(tmp_path / "run")                   # the held-out split only: nothing garbled
    assert not (tmp_path / "run" / "latest").exists()   # the first evaluation scores too


@pytest.mark.filterwarnings("error::RuntimeWarning")    # no numpy warning on each step
def test_a_reward_that_cannot_score_logs_null_metrics(tiny_base, tmp_path, capsys):
    assert grpo(tiny_base, tmp_path, "tang-form,R:cannot_score") == 0
    steps = [r for r in strict_rows(tmp_path / "run") if "train_loss" in r]
    assert len(steps) == 2
    for step in steps:
        assert step["rewards/cannot_score/mean"] is None
        assert "rewards/cannot_score/mean" in step["nonfinite"]
        assert isinstance(step["rewards/tang-form/mean"], float)
