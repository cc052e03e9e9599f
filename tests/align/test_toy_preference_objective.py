"""Adding a fine-tuning objective is an Objective record with its settings and a Recipe
(CONTRIBUTING.md, "Adding an objective"): a toy preference objective registered here, in
OBJECTIVES and FINETUNE_RECIPES and nowhere else, trains through `glassformer finetune
--objective toy`, offers its own setting as a flag, refuses another objective's, and resumes."""
from dataclasses import dataclass
from functools import partial

import numpy as np
import pytest
from align_fixtures import FAST, LORA, pref_records, write_jsonl

from glassformer.cli import main
from glassformer.errors import GlassformerError
from glassformer.io.checkpoint import load_checkpoint, read_train_log
from glassformer.models.family import CAUSAL
from glassformer.train.objectives import OBJECTIVES
from glassformer.train.objectives.dpo import (draw_pairs, policy_and_reference, sequence_logps,
                                              sequence_logps_backward)
from glassformer.train.objectives.objective import PREFS, Objective, check_kind, only_trained
from glassformer.train.objectives.settings import Settings, setting
from glassformer.train.recipes import FINETUNE_RECIPES, TANG_SFT, Recipe


@dataclass(frozen=True)
class MarginSettings(Settings):
    """The toy's one setting."""
    margin: float = setting(1.0, "how far the chosen reply's log-prob should lead the rejected's")

    def __post_init__(self):
        self.check_types_and_choices()
        if not self.margin > 0.0:
            raise GlassformerError(f"--margin must be above 0, got {self.margin}")


def margin_loss_and_grads(family, params, cfg, x, y, *, rng=None, dloss=1.0, train_cfg=None,
                          frozen=None):
    """mean(relu(margin - (log p(chosen) - log p(rejected)))) over the batch's B pairs."""
    policy, _ = policy_and_reference(params, frozen)
    seq = sequence_logps(family, policy, cfg, x, y, train=True, rng=rng)
    n = len(seq.logps) // 2
    gap = seq.logps[:n] - seq.logps[n:]                                   # (B,)
    short = train_cfg.objective_settings.margin - gap                    # (B,)
    active = (short > 0.0).astype(seq.logps.dtype)                       # (B,)
    loss = float(np.mean(np.maximum(short, 0.0)))
    dgap = -float(dloss) * active / n                                    # (B,)
    dlogits = sequence_logps_backward(np.concatenate([dgap, -dgap]), seq)
    grads = only_trained(family.backward(dlogits, seq.ctx), params)
    return loss, grads, {"margin_met": float(1.0 - active.mean())}


def margin_eval_loss(family, params, cfg, x, y, *, train_cfg=None, frozen=None):
    return margin_loss_and_grads(family, params, cfg, x, y, train_cfg=train_cfg,
                                 frozen=frozen)[0]


TOY = Objective(name="toy", kind=CAUSAL, reads=PREFS, draw=draw_pairs,
                loss_and_grads=margin_loss_and_grads, eval_loss=margin_eval_loss,
                check=partial(check_kind, CAUSAL), settings=MarginSettings)
TOY_RECIPE = Recipe(name="toy-margin", objective="toy", model=dict(model="smollm2"),
                    train={**TANG_SFT.train, "max_iters": 4}, settings=dict(margin=2.0))


@pytest.fixture
def registered(monkeypatch):
    monkeypatch.setitem(OBJECTIVES, TOY.name, TOY)                  # the objective's line
    monkeypatch.setitem(FINETUNE_RECIPES, TOY.name, TOY_RECIPE)     # the recipe's line


def test_a_toy_preference_objective_trains_resumes_and_owns_its_flags(
        registered, tiny_base, tmp_path, capsys):
    data = write_jsonl(tmp_path / "prefs.jsonl", pref_records())
    out = tmp_path / "toy"
    args = ["finetune", "--model", str(tiny_base), "--data", str(data), "--out", str(out),
            "--objective", "toy", *FAST, *LORA, "--lr", "0.05"]
    assert main([*args, "--margin", "1.5"]) == 0
    state = load_checkpoint(out).state["train_config"]
    assert state["objective"] == "toy" and state["objective_settings"] == {"margin": 1.5}
    steps = [r for r in read_train_log(out) if "train_loss" in r]
    assert len(steps) == 2 and all("margin_met" in r for r in steps)
    assert main(["finetune", "--out", str(out), "--resume", "--max-iters", "4",
                 "--no-progress"]) == 0
    assert [r["iter"] for r in read_train_log(out) if "train_loss" in r] == [0, 1, 2, 3]
    capsys.readouterr()
    # another objective's setting: one generic line, nothing written
    assert main([*args[:6], str(tmp_path / "no"), *args[7:], "--num-generations", "4"]) == 2
    err = capsys.readouterr().err
    assert "--num-generations is a grpo setting, not one of --objective toy" in err
    assert len(err.splitlines()) == 1 and not (tmp_path / "no").exists()
    # the recipe's default for its own setting, said in --help
    with pytest.raises(SystemExit):
        main(["finetune", "--help"])
    assert "toy: how far the chosen reply's log-prob" in capsys.readouterr().out
