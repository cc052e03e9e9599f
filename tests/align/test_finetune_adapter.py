"""`finetune --adapter DIR`: a run continues an existing PEFT adapter instead of fresh ones."""
import numpy as np

from align_fixtures import FAST, LORA, chat_records, write_jsonl
from glassformer.cli import main
from glassformer.io.checkpoint import load_checkpoint
from glassformer.io.safetensors import load_safetensors


def test_adapter_run_starts_from_the_adapter_and_trains_it(tiny_base, tmp_path, capsys):
    data = write_jsonl(tmp_path / "chat.jsonl", chat_records())
    first, again, zero = tmp_path / "first", tmp_path / "again", tmp_path / "zero"
    assert main(["finetune", "--model", str(tiny_base), "--data", str(data), "--out",
                 str(first), *FAST, *LORA]) == 0
    start = load_safetensors(first / "adapter_model.safetensors")
    # zero iterations: the run's adapter is the one it started from, bit for bit
    assert main(["finetune", "--model", str(tiny_base), "--data", str(data), "--out", str(zero),
                 "--adapter", str(first), *FAST, "--max-iters", "0",
                 "--lr-decay-iters", "2"]) == 0
    same = load_safetensors(zero / "adapter_model.safetensors")
    assert same.keys() == start.keys()
    for key in start:
        np.testing.assert_array_equal(same[key], start[key])
    # two more iterations move it on from there (its B is not zero any more)
    assert main(["finetune", "--model", str(tiny_base), "--data", str(data), "--out",
                 str(again), "--adapter", str(first), *FAST]) == 0
    moved = load_checkpoint(again).params["blocks.0.attn.wq.lora_B"]
    began = start["base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight"].T
    assert np.abs(began).max() > 0 and not np.array_equal(moved, began)
    # and it resumes like any run
    assert main(["finetune", "--out", str(again), "--resume", "--max-iters", "3",
                 "--no-progress"]) == 0


def test_adapter_refuses_lora_flags_in_one_line(tiny_base, tmp_path, capsys):
    data = write_jsonl(tmp_path / "chat.jsonl", chat_records())
    out = tmp_path / "run"
    assert main(["finetune", "--model", str(tiny_base), "--data", str(data), "--out", str(out),
                 "--adapter", str(tmp_path), "--lora-r", "4", *FAST]) == 2
    assert "--adapter continues" in capsys.readouterr().err and not out.exists()
    assert main(["finetune", "--model", str(tiny_base), "--data", str(data), "--out", str(out),
                 "--adapter", str(tmp_path / "nowhere"), *FAST]) == 2
    assert "adapter_config.json" in capsys.readouterr().err and not out.exists()
