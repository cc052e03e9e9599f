"""Run folders written before each objective owned its settings (commit 0db0b93: the settings
flat in train_config, DPO's reference in finetune.json) resume, their settings folded into
objective_settings by train_config_from_dict (old_runs_0db0b93/README.md says how they were
made)."""
import json
import shutil
from pathlib import Path

import pytest

from glassformer.cli import main
from glassformer.io.checkpoint import load_checkpoint, read_train_log

OLD = Path(__file__).parent / "old_runs_0db0b93"
MADE_IN = "/tmp/oldruns"   # where the folders were written; their records name it


def moved(tmp_path: Path, run: str) -> Path:
    """The old run and what it reads (the base model, the data, the adapter dpo_ref_adapter
    started from) copied into tmp_path, its records pointed at the copies."""
    for name in {"base", "corpus.txt", "prefs.jsonl", "prompts.jsonl", "dpo", run}:
        source = OLD / name
        if source.is_dir():
            shutil.copytree(source, tmp_path / name)
        else:
            shutil.copy(source, tmp_path / name)
    for record in ("data.json", "finetune.json"):
        path = tmp_path / run / record
        if path.is_file():
            path.write_text(path.read_text(encoding="utf-8").replace(MADE_IN, str(tmp_path)),
                            encoding="utf-8")
    return tmp_path / run


@pytest.mark.parametrize("run, command, settings", [
    ("next_token", "train", {}),
    ("mlm", "train", {"mask_prob": 0.3}),
    ("moe", "train", {"balance": "bias", "router_aux_coef": 0.1}),
    ("dpo", "finetune", {"beta": 0.2, "sft_weight": 0.5, "ref": "base"}),
    ("dpo_ref_adapter", "finetune", {"beta": 0.1, "sft_weight": 0.0, "ref": "base"}),
    ("grpo", "finetune", {"num_generations": 3, "max_completion_tokens": 6, "temperature": 1.0,
                          "epsilon": 0.2, "epsilon_high": None, "loss_type": "dapo",
                          "scale_rewards": "group", "reward": "tang-form",
                          "reward_weights": "", "beta": 0.05}),
])
def test_a_run_from_0db0b93_resumes_with_its_settings_folded(tmp_path, run, command, settings):
    out = moved(tmp_path, run)
    assert main([command, "--out", str(out), "--resume", "--max-iters", "3",
                 "--no-progress"]) == 0
    saved = load_checkpoint(out).state["train_config"]
    assert saved["objective_settings"] == settings
    assert not {"beta", "mask_prob", "balance", "num_generations"} & saved.keys()
    assert [r["iter"] for r in read_train_log(out) if "train_loss" in r] == [0, 1, 2]
    if command == "finetune":   # the record keeps what it had; the reference is a setting now
        assert json.loads((out / "finetune.json").read_text())["objective"] == run.split("_")[0]
