"""`glassformer finetune --workers 2` (issue 33): the same MPI seam as `train` (ZeRO-1 over the
LoRA adapters only): two ranks give one process's losses, and a run stopped and resumed on two
ranks continues exactly, bit for bit, as the uninterrupted one. Bad --workers is one line."""
import numpy as np
import pytest

from glassformer.cli import main
from glassformer.io.checkpoint import load_checkpoint, read_train_log
from test_finetune import FAST, base, chat_file  # noqa: F401  (base: the tiny model fixture)

pytest.importorskip("mpi4py", reason="mpi4py is not installed")
SAME_LOSS_RTOL = 1e-5  # float32 sums over shards in another order, nothing else
ITERS = ["--max-iters", "4", "--lr-decay-iters", "4"]


def train_losses(run_dir) -> dict[int, float]:
    return {r["iter"]: r["train_loss"] for r in read_train_log(run_dir) if "train_loss" in r}


@pytest.mark.slow
def test_two_ranks_match_one_process_and_resume_exactly(base, tmp_path):  # noqa: F811
    data = chat_file(tmp_path / "chat.jsonl")
    common = ["finetune", "--model", str(base), "--data", str(data), *FAST, *ITERS]
    one, two, halves = tmp_path / "one", tmp_path / "two", tmp_path / "halves"
    assert main([*common, "--out", str(one)]) == 0
    assert main([*common, "--out", str(two), "--workers", "2"]) == 0
    assert main([*common, "--out", str(halves), "--workers", "2", "--max-iters", "2"]) == 0
    # the resume keeps the run's two ranks without being told
    assert main(["finetune", "--out", str(halves), "--resume", "--max-iters", "4",
                 "--no-progress"]) == 0
    alone, straight, resumed = train_losses(one), train_losses(two), train_losses(halves)
    assert sorted(straight) == sorted(alone) == sorted(resumed) == list(range(4))
    np.testing.assert_allclose([straight[i] for i in range(4)], [alone[i] for i in range(4)],
                               rtol=SAME_LOSS_RTOL)
    assert all(resumed[it] == straight[it] for it in straight)   # bit for bit
    ckpt = load_checkpoint(two)
    assert ckpt.state["train_config"]["workers"] == 2
    assert all(key.endswith((".lora_A", ".lora_B")) for key in ckpt.params)
    for key, value in load_checkpoint(halves).params.items():
        np.testing.assert_array_equal(value, ckpt.params[key], err_msg=key)


@pytest.mark.parametrize("flags, message", [
    (["--workers", "0"], "--workers must be at least 1, got 0"),
    (["--workers", "3"], "batch"),
])
def test_bad_workers_input_is_one_line(base, tmp_path, capsys, flags, message):  # noqa: F811
    data = chat_file(tmp_path / "chat.jsonl")
    code = main(["finetune", "--model", str(base), "--data", str(data), *FAST,
                 "--out", str(tmp_path / "run"), *flags])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and message in err[0], err
    assert not (tmp_path / "run").exists()
