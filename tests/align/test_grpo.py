"""GRPO (`finetune --objective grpo`): the loss's gradient against finite differences, the
tang-form reward, a short run that logs TRL's names and resumes exactly, and bad input."""
import math

import numpy as np
import pytest

from align_fixtures import FAST, GRPO_FLAGS, LORA, prompt_records, write_jsonl
from glassformer.cli import main
from glassformer.io.checkpoint import read_train_log
from glassformer.ops.grpo_loss import grpo_loss_backward, grpo_loss_forward
from glassformer.train.rewards.tang_form import tang_form_score

FD_TOL = 1e-6   # float64 central differences on a smooth function
PROMPT = "寫一首五言絕句，以「四」字開頭。"


@pytest.mark.parametrize("loss_type", ["grpo", "dapo", "dr_grpo", "bnpo"])
def test_grpo_loss_gradient_matches_finite_differences(loss_type):
    rng = np.random.default_rng(0)
    logps = rng.normal(-2.0, 0.5, (4, 6))
    old = logps + rng.normal(0.0, 0.3, (4, 6))      # ratios on both sides of the clip range
    ref = logps + rng.normal(0.0, 0.5, (4, 6))
    mask = rng.random((4, 6)) < 0.7
    adv = rng.standard_normal(4)
    settings = dict(ref_logps=ref, beta=0.1, loss_type=loss_type, max_completion_length=6)

    def loss_of(values):
        return grpo_loss_forward(values, old, adv, mask, **settings)[0]

    _, ctx, _ = grpo_loss_forward(logps, old, adv, mask, **settings)
    grad = grpo_loss_backward(1.0, ctx)
    numeric = np.zeros_like(logps)
    for index in np.ndindex(logps.shape):
        up, down = logps.copy(), logps.copy()
        up[index] += 1e-6
        down[index] -= 1e-6
        numeric[index] = (loss_of(up) - loss_of(down)) / 2e-6
    np.testing.assert_allclose(grad, numeric, atol=FD_TOL)


def test_tang_form_scores_form_start_and_repeats():
    real = "四時運灰琯，一夕變冬春。送寒餘雪盡，迎歲早梅新。"
    assert tang_form_score(PROMPT, real) == pytest.approx(2.5)   # 20 distinct
    repeated = "四時運灰琯，四時運灰琯。四時運灰琯，四時運灰琯。"
    assert tang_form_score(PROMPT, repeated) == pytest.approx(1.0 + 0.5 + 5 / 20)
    three = "四時運灰琯，一夕變冬春。送寒餘雪盡。"
    assert tang_form_score(PROMPT, three) == pytest.approx(0.6 + 0.5 + 1.0)
    assert tang_form_score(PROMPT, "") == 0.0
    # wrong first character, trailing text: 4 x 0.2 - 0.2, no start bonus, 19 of 20 distinct
    off = "春時運灰琯，一夕變冬春。送寒餘雪盡，迎歲早梅新。X"
    assert tang_form_score(PROMPT, off) == pytest.approx(0.6 + 0.0 + 19 / 20)


def test_grpo_run_logs_trls_names_and_resumes_exactly(tiny_base, tmp_path, capsys):
    data = write_jsonl(tmp_path / "prompts.jsonl", prompt_records())
    common = ["--model", str(tiny_base), "--data", str(data), *FAST, *LORA, *GRPO_FLAGS,
              "--batch-size", "2", "--max-iters", "3", "--lr-decay-iters", "3"]
    straight, halves = tmp_path / "straight", tmp_path / "halves"
    assert main(["finetune", *common, "--out", str(straight)]) == 0
    assert main(["finetune", *common, "--out", str(halves), "--max-iters", "2"]) == 0
    assert main(["finetune", "--out", str(halves), "--resume", "--max-iters", "3",
                 "--no-progress"]) == 0
    logs = {str(p): [r for r in read_train_log(p) if "train_loss" in r]
            for p in (straight, halves)}
    step = logs[str(straight)][0]
    for name in ("reward", "reward_std", "rewards/tang-form/mean", "rewards/tang-form/std",
                 "frac_reward_zero_std", "completions/mean_length",
                 "completions/clipped_ratio", "clip_ratio/region_mean"):
        assert name in step and math.isfinite(step[name]), name
    assert step["completions/max_length"] <= 6
    np.testing.assert_allclose([r["reward"] for r in logs[str(halves)]],
                               [r["reward"] for r in logs[str(straight)]], rtol=1e-6)


REWARDS = """
def raises(prompts, completions, **columns):
    raise ValueError("no score today")

def short(prompts, completions, **columns):
    return [1.0]
"""


@pytest.mark.parametrize("flags, message", [
    (["--reward", "REWARDS:raises"], "reward function raises raised ValueError: no score today"),
    (["--reward", "REWARDS:short"], "returned 1 rewards for 3 completions"),
    (["--reward", "nowhere.py:f"], "reward file nowhere.py does not exist"),
    (["--num-generations", "1"], "--num-generations must be at least 2"),
    (["--max-completion-tokens", "60"], "longer than block size 64"),
    (["--grad-accum", "3"], "give --batch-size 12 instead of --grad-accum 3"),
])
def test_bad_grpo_input_is_one_line_and_writes_nothing(tiny_base, tmp_path, capsys, flags,
                                                       message):
    (tmp_path / "rewards.py").write_text(REWARDS, encoding="utf-8")
    flags = [f.replace("REWARDS", str(tmp_path / "rewards.py")) for f in flags]
    message = message.replace("REWARDS", str(tmp_path / "rewards.py"))
    data = write_jsonl(tmp_path / "prompts.jsonl", prompt_records())
    out = tmp_path / "run"
    assert main(["finetune", "--model", str(tiny_base), "--data", str(data), "--out", str(out),
                 *FAST, *LORA, *GRPO_FLAGS, *flags]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.splitlines()) == 1
    assert not out.exists()


def test_align_judge_scores_form_distinct_and_copies():
    from bench.align_judge import scores
    real = "四時運灰琯，一夕變冬春。送寒餘雪盡，迎歲早梅新。"
    repeated = "開門開門開，開門開門開。開門開門開，開門開門開。"
    conversations = [[{"role": "user", "content": PROMPT}]] * 3
    result = scores(conversations, [real, repeated, "四時"], {real})
    assert result == {"well_formed": pytest.approx(2 / 3), "distinct_median": 1.0,
                      "copied": pytest.approx(1 / 3)}
