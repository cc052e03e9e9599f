"""`finetune --objective dpo|grpo --workers 2`: real MPI ranks on the tiny random LLaMA.

What is asserted, and why:
- DPO: each rank takes whole pairs and the loss is the whole batch's (train/objectives/ranks.py),
  so two ranks give one process's losses, TRL metrics and adapters to float32 rounding (the
  ranks' forwards run on other shapes, and their grads are summed in another order).
- GRPO's update on the same completions: two ranks compute one process's advantages (ties,
  zero-std groups, None rewards, --scale-rewards batch), loss (every --loss-type, the DAPO
  normaliser summed over the ranks), clip and KL metrics, and gradient (the ranks' summed) to
  float rounding. A whole run is not compared with one process: each rank samples its groups
  with a seed of its own, so its completions differ from those one process samples from one
  stream. A 2-rank GRPO run is asserted reproducible instead: stopped and resumed, its losses,
  rewards and adapters equal the uninterrupted run's bit for bit.
- Ctrl-C stops both ranks of a GRPO run at one checkpoint with one line, and it resumes.
- A batch that does not split into whole pairs or groups per rank is one line."""
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from align_fixtures import FAST, GRPO_FLAGS, LORA, pref_records, prompt_records, write_jsonl
from glassformer.cli import launch, main
from glassformer.io.checkpoint import load_checkpoint, read_train_log

pytest.importorskip("mpi4py", reason="mpi4py is not installed")
ROOT_ENV = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
SAME_RTOL = 1e-5        # float32 forwards on other shapes and sums in another order
ADAPTER_ATOL = 5e-5     # 4 AdamW steps at lr 0.05: m / sqrt(v) scales float32 noise up
METRICS = ("rewards/chosen", "rewards/rejected", "rewards/accuracies", "rewards/margins",
           "logps/chosen", "logps/rejected")
# a reward that varies with the sampled ids, so groups have spread and the adapters move
IDS_REWARD = """
def ids(prompts, completions, completion_ids, **columns):
    return [float(sum(row) % 7) for row in completion_ids]
"""


def steps_of(run) -> dict[int, dict]:
    return {r["iter"]: r for r in read_train_log(run) if "train_loss" in r}


@pytest.mark.slow
def test_dpo_on_two_ranks_is_one_process_and_resumes_exactly(tiny_base, tmp_path, capsys):
    data = write_jsonl(tmp_path / "prefs.jsonl", pref_records())
    common = ["finetune", "--model", str(tiny_base), "--data", str(data), "--objective", "dpo",
              *FAST, *LORA, "--max-iters", "4", "--lr-decay-iters", "4", "--lr", "0.05"]
    one, two, halves = tmp_path / "one", tmp_path / "two", tmp_path / "halves"
    assert main([*common, "--out", str(one)]) == 0
    assert main([*common, "--out", str(two), "--workers", "2"]) == 0
    assert main([*common, "--out", str(halves), "--workers", "2", "--max-iters", "2"]) == 0
    assert main(["finetune", "--out", str(halves), "--resume", "--max-iters", "4",
                 "--no-progress"]) == 0
    alone, straight, resumed = steps_of(one), steps_of(two), steps_of(halves)
    assert sorted(alone) == sorted(straight) == sorted(resumed) == [0, 1, 2, 3]
    for name in ("train_loss", *METRICS):
        np.testing.assert_allclose([straight[i][name] for i in range(4)],
                                   [alone[i][name] for i in range(4)], rtol=SAME_RTOL,
                                   atol=1e-7, err_msg=name)
    assert all(resumed[i]["train_loss"] == straight[i]["train_loss"] for i in range(4))
    ours, theirs = load_checkpoint(two).params, load_checkpoint(one).params
    assert load_checkpoint(two).state["train_config"]["workers"] == 2
    assert max(float(np.abs(theirs[k]).max()) for k in theirs) > 0.01   # the adapters moved
    for key, value in ours.items():
        np.testing.assert_allclose(value, theirs[key], atol=ADAPTER_ATOL, err_msg=key)
        np.testing.assert_array_equal(load_checkpoint(halves).params[key], value, err_msg=key)


@pytest.mark.slow
def test_grpo_on_two_ranks_is_reproducible_and_resumes_exactly(tiny_base, tmp_path, capsys):
    reward = tmp_path / "reward.py"
    reward.write_text(IDS_REWARD, encoding="utf-8")
    data = write_jsonl(tmp_path / "prompts.jsonl", prompt_records())
    common = ["finetune", "--model", str(tiny_base), "--data", str(data), *FAST, *LORA,
              *GRPO_FLAGS, "--reward", f"{reward}:ids", "--scale-rewards", "batch",
              "--batch-size", "2", "--max-iters", "3", "--lr-decay-iters", "3", "--lr", "0.05",
              "--workers", "2"]
    straight, halves = tmp_path / "straight", tmp_path / "halves"
    assert main([*common, "--out", str(straight)]) == 0
    assert main([*common, "--out", str(halves), "--max-iters", "2"]) == 0
    assert main(["finetune", "--out", str(halves), "--resume", "--max-iters", "3",
                 "--no-progress"]) == 0
    first, second = steps_of(straight), steps_of(halves)
    assert sorted(first) == sorted(second) == [0, 1, 2]
    for it, record in first.items():
        for name in ("train_loss", "reward", "reward_std", "completions/mean_length"):
            assert second[it][name] == record[name], (it, name)
    step = first[0]
    assert step["reward_std"] > 0.0 and step["completions/max_length"] <= 6
    assert all(name in step for name in ("rewards/ids/mean", "frac_reward_zero_std",
                                         "clip_ratio/region_mean"))
    resumed = load_checkpoint(halves).params
    for key, value in load_checkpoint(straight).params.items():
        np.testing.assert_array_equal(resumed[key], value, err_msg=key)


@pytest.mark.slow
def test_ctrl_c_stops_both_ranks_of_a_grpo_run_at_a_checkpoint(tiny_base, tmp_path, capsys):
    reward = tmp_path / "reward.py"
    reward.write_text(IDS_REWARD, encoding="utf-8")
    data = write_jsonl(tmp_path / "prompts.jsonl", prompt_records())
    out = tmp_path / "stopped"
    proc = subprocess.Popen(
        [sys.executable, "-m", "glassformer", "finetune", "--model", str(tiny_base), "--data",
         str(data), "--out", str(out), *FAST, *LORA, *GRPO_FLAGS, "--reward", f"{reward}:ids",
         "--batch-size", "2", "--max-iters", "100000", "--workers", "2"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.time() + 60
    while not (out / "latest").exists() and time.time() < deadline:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGINT)     # a terminal's Ctrl-C reaches the whole group
    _, err = proc.communicate(timeout=60)
    stopped = [line for line in err.splitlines() if "stopped by" in line]
    assert proc.returncode == 130 and len(stopped) == 1 and "Traceback" not in err, err
    at = load_checkpoint(out).state["iter"]
    assert f"at iteration {at}" in stopped[0] and "--resume" in stopped[0]
    assert main(["finetune", "--out", str(out), "--resume", "--max-iters", str(at + 1),
                 "--no-progress"]) == 0
    assert max(steps_of(out)) == at


GRPO_UPDATE = r"""
import json
import numpy as np
from mpi4py import MPI
from glassformer.models import llama
from glassformer.train.loop import TrainConfig
from glassformer.train.objectives.grpo import GRPOSettings
from glassformer.train.objectives.dpo import REF_PREFIX
from glassformer.train.objectives.grpo import batch_advantages, rollout_loss_and_grads, rollout_of

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
G, B, P, C, V = 3, 4, 5, 6, 40          # 4 prompts x 3 completions, 2 prompts a rank
N = B * G
rng = np.random.default_rng(0)
cfg = llama.LlamaConfig(vocab_size=V, max_seq_len=32, n_layer=1, n_head=2, n_kv_head=1,
                        d_model=16)
params = llama.init_params(cfg, rng)
frozen = {REF_PREFIX + k: v + np.float32(0.02) * rng.standard_normal(v.shape).astype(np.float32)
          for k, v in params.items()}
prompt_ids = rng.integers(1, V, (N, P))
prompt_mask = np.arange(P)[None, :] >= np.repeat(rng.integers(0, 3, B), G)[:, None]  # left pad
lengths = rng.integers(1, C + 1, N)
lengths[:G] = C                          # rank 0's rows are wider than rank 1's
lengths[G * 2:] = np.minimum(lengths[G * 2:], 4)
completion = rng.integers(1, V, (N, C))
completion_mask = np.arange(C)[None, :] < lengths[:, None]
truncated = lengths == C
table = rng.normal(size=(N, 2))
table[0] = np.nan                        # an unscorable completion
table[3:6] = 1.5                         # a zero-std group
table[7:9, 0] = table[6, 0]              # ties
table[9:12, 1] = np.nan                  # one function says None for a whole group
names = ["a", "b"]
mine = slice(rank * N // 2, (rank + 1) * N // 2)
width = int(lengths[mine].max())         # each rank's rollout as wide as its own rows
whole = rollout_of(prompt_ids, prompt_mask, completion, completion_mask)
part = rollout_of(prompt_ids[mine], prompt_mask[mine], completion[mine, :width],
                  completion_mask[mine, :width])
old = (rng.normal(-3.7, 0.3, whole.y.shape)).astype(np.float32)   # ratios past the clip range
worst = {"adv": 0.0, "reward_metrics": 0.0, "loss": 0.0, "metrics": 0.0, "grads": 0.0}
for loss_type in ("grpo", "dapo", "dr_grpo", "bnpo"):
    for scale, beta in (("group", 0.0), ("batch", 0.1), ("none", 0.0)):
        train_cfg = TrainConfig(objective="grpo", objective_settings=GRPOSettings(
            num_generations=G, max_completion_tokens=C, loss_type=loss_type,
            scale_rewards=scale, beta=beta, temperature=0.7, reward_weights="1.0,0.5"))
        adv, reward_metrics = batch_advantages(None, table, names, lengths, truncated, train_cfg)
        adv_r, reward_metrics_r = batch_advantages(comm, table[mine], names, lengths[mine],
                                                   truncated[mine], train_cfg)
        worst["adv"] = max(worst["adv"], float(np.abs(adv_r - adv[mine]).max()))
        worst["reward_metrics"] = max(worst["reward_metrics"], max(
            abs(reward_metrics_r[k] - v) for k, v in reward_metrics.items()))
        loss, grads, metrics = rollout_loss_and_grads(
            llama, params, cfg, whole, adv, frozen=frozen, train_cfg=train_cfg, old_logps=old)
        loss_r, grads_r, metrics_r = rollout_loss_and_grads(
            llama, params, cfg, part, adv_r, frozen=frozen, train_cfg=train_cfg,
            old_logps=old[mine, :part.y.shape[1]], comm=comm)
        assert metrics["clip_ratio/region_mean"] > 0.0
        worst["loss"] = max(worst["loss"], abs(loss_r - loss) / abs(loss))
        worst["metrics"] = max(worst["metrics"], max(abs(metrics_r[k] - v)
                                                     for k, v in metrics.items()))
        scale_of = max(float(np.abs(g).max()) for g in grads.values())
        for key, g in grads.items():
            summed = comm.allreduce(grads_r[key])           # the ranks' grads, summed
            worst["grads"] = max(worst["grads"], float(np.abs(summed - g).max()) / scale_of)
if rank == 0:
    print(json.dumps(worst))
"""


def test_grpo_update_on_two_ranks_is_one_process_update(tmp_path):
    """The same completions and rewards split over 2 ranks (each its own width): the whole
    batch's advantages, loss, metrics and gradient, for every loss type and scale."""
    script = tmp_path / "grpo_update.py"
    script.write_text(GRPO_UPDATE, encoding="utf-8")
    done = subprocess.run([launch.mpiexec_path(), "-n", "2", sys.executable, str(script)],
                          env=ROOT_ENV, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0, done.stderr[-2000:]
    worst = json.loads(done.stdout.strip().splitlines()[-1])
    assert worst["adv"] == 0.0 and worst["reward_metrics"] == 0.0   # float64 on the same rows
    assert worst["loss"] < SAME_RTOL and worst["metrics"] < 1e-6 and worst["grads"] < 1e-5, worst


@pytest.mark.parametrize("objective, flags, unit", [
    ("dpo", [], "(pairs)"),
    ("grpo", GRPO_FLAGS[2:], "(prompts)"),
])
def test_a_batch_that_does_not_split_into_whole_units_is_one_line(tiny_base, tmp_path, capsys,
                                                                   objective, flags, unit):
    data = write_jsonl(tmp_path / "data.jsonl", pref_records() if objective == "dpo"
                       else prompt_records())
    out = tmp_path / "run"
    code = main(["finetune", "--model", str(tiny_base), "--data", str(data), "--out", str(out),
                 "--objective", objective, *flags, *FAST, *LORA, "--batch-size", "3",
                 "--workers", "2"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1, err
    assert f"--batch-size 3 {unit} does not split evenly over 2 ranks" in err[0], err
    assert not out.exists()
