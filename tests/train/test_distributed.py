"""Data-parallel training over MPI (train/distributed.py, cli/launch.py): 1 rank, 2 ranks and 2
ranks forced over TCP give the same losses; a rank killed with kill -9 stops the job with one line
and --resume continues exactly; bad --workers input is one line each."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from glassformer.cli import main
from glassformer.cli import launch
from glassformer.io.checkpoint import load_checkpoint, read_train_log
from glassformer.train.distributed import (balanced_groups, check_shards, default_workers,
                                           shard_rows, shard_weights)

pytest.importorskip("mpi4py", reason="mpi4py is not installed")
SHAKESPEARE = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "tinyshakespeare.txt"
TINY_FLAGS = ["--n-layer", "1", "--n-head", "2", "--d-model", "16", "--block-size", "16",
              "--batch-size", "4", "--eval-iters", "2", "--warmup-iters", "2",
              "--lr-decay-iters", "40", "--eval-interval", "3", "--no-progress"]
ITERS = 40
SAME_LOSS_RTOL = 1e-5  # float32 sums over shards in another order, nothing else
ROOT_ENV = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
STOP_WITHIN_S = 10.0   # a killed rank ends the whole job within this


def glassformer(*args) -> list[str]:
    return [sys.executable, "-m", "glassformer", "train", *args]


def train_losses(run_dir) -> dict[int, float]:
    return {r["iter"]: r["train_loss"] for r in read_train_log(run_dir) if "train_loss" in r}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    if not SHAKESPEARE.is_file():
        pytest.skip(f"corpus {SHAKESPEARE} is absent")
    path = tmp_path_factory.mktemp("data") / "corpus.txt"
    path.write_text(SHAKESPEARE.read_text(encoding="utf-8")[:20_000], encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def runs(corpus, tmp_path_factory):
    """The same 40 iterations on 1 rank, on 2 ranks (`--workers 2`), and on 2 ranks of the
    user's own mpiexec with shared memory off (TCP between the ranks)."""
    base = tmp_path_factory.mktemp("runs")
    common = ["--data", str(corpus), *TINY_FLAGS, "--max-iters", str(ITERS), "--grad-accum", "2"]
    assert main(["train", *common, "--out", str(base / "one"), "--workers", "1"]) == 0
    subprocess.run(glassformer(*common, "--out", str(base / "two"), "--workers", "2"),
                   check=True, capture_output=True)
    mpiexec = [launch.mpiexec_path(), "-n", "2", "--mca", "btl", "tcp,self"]
    subprocess.run([*mpiexec, *glassformer(*common, "--out", str(base / "tcp"))], env=ROOT_ENV,
                   check=True, capture_output=True)
    return {name: base / name for name in ("one", "two", "tcp")}


@pytest.mark.slow
def test_one_rank_two_ranks_and_tcp_give_the_same_losses(runs):
    one = train_losses(runs["one"])
    assert sorted(one) == list(range(ITERS))
    for name in ("two", "tcp"):
        theirs = train_losses(runs[name])
        assert sorted(theirs) == sorted(one)
        for it, loss in one.items():
            assert theirs[it] == pytest.approx(loss, rel=SAME_LOSS_RTOL), (name, it)
    two = load_checkpoint(runs["two"])
    assert two.state["iter"] == ITERS and two.optimizer["t"] == ITERS


def rank_pid(out: Path, rank: int) -> int | None:
    """The pid of rank `rank` of the run writing `out` (Linux /proc)."""
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            variables = environ.read_bytes().split(b"\0")
            command = (environ.parent / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"OMPI_COMM_WORLD_RANK={rank}".encode() in variables and str(out).encode() in command:
            return int(environ.parent.name)
    return None


@pytest.mark.slow
def test_kill_9_of_a_rank_stops_the_job_and_resume_is_exact(corpus, runs, tmp_path):
    out = tmp_path / "killed"
    common = ["--data", str(corpus), *TINY_FLAGS, "--out", str(out), "--workers", "2",
              "--grad-accum", "2"]
    proc = subprocess.Popen(glassformer(*common, "--max-iters", "100000"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while not (out / "latest").exists() and time.time() < deadline:
        time.sleep(0.05)
    pid = rank_pid(out, 1)
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    killed_at = time.time()
    _, err = proc.communicate(timeout=60)
    assert time.time() - killed_at < STOP_WITHIN_S
    assert proc.returncode != 0
    lines = [line for line in err.splitlines() if "error" in line]
    assert len(lines) == 1 and "rank 1" in lines[0] and "SIGKILL" in lines[0], err
    assert "last checkpoint: iteration" in lines[0] and "Traceback" not in err
    at = load_checkpoint(out).state["iter"]
    assert at < ITERS - 3   # the test needs iterations left to compare
    subprocess.run(glassformer(*common, "--resume", "--max-iters", str(at + 3)), check=True,
                   capture_output=True)
    straight, resumed = train_losses(runs["two"]), train_losses(out)
    assert sorted(resumed) == list(range(at + 3))
    assert all(resumed[it] == straight[it] for it in resumed)  # bit for bit, as one process


def test_shards_split_evenly():
    assert shard_rows(12, 2, 1) == slice(6, 12)
    assert [shard_rows(6, 3, r) for r in range(3)] == [slice(0, 2), slice(2, 4), slice(4, 6)]
    with pytest.raises(ValueError, match="does not split evenly over 2 ranks"):
        check_shards(5, 2)
    with pytest.raises(ValueError, match="3 ranks need at least 3 rows"):
        check_shards(2, 3)
    assert 1 <= default_workers(12) <= 12 and 12 % default_workers(12) == 0
    assert default_workers(7) in (1, 7)  # a prime batch: one rank, unless 7 cores


def test_shard_weights_count_targets():
    import numpy as np
    y = np.zeros((4, 3), dtype=np.int64)
    y[:2, 1:] = -100   # shard 0 keeps 2 targets of 6, shard 1 all 6
    assert shard_weights(y, 2) == [0.25, 0.75]
    groups = balanced_groups({"a": np.zeros(4), "b": np.zeros(3), "c": np.zeros(2)}, 2)
    assert groups == [["a"], ["b", "c"]]


@pytest.mark.parametrize("flags, message", [
    (["--workers", "0"], "--workers must be at least 1"),
    (["--workers", "5"], "5 ranks need at least 5 rows per batch"),
    (["--workers", "3"], "does not split evenly over 3 ranks"),
    (["--workers", "2", "--hostfile", "no-such-hostfile"], "hostfile no-such-hostfile does not "
                                                            "exist"),
])
def test_bad_workers_input_is_one_line(corpus, tmp_path, capsys, flags, message):
    out = tmp_path / "run"
    assert main(["train", "--data", str(corpus), *TINY_FLAGS, "--out", str(out), *flags]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]
    assert not out.exists()


def test_missing_mpiexec_is_one_line(corpus, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(sys, "executable", str(tmp_path / "bin" / "python"))
    monkeypatch.setenv("PATH", str(tmp_path))
    out = tmp_path / "run"
    assert main(["train", "--data", str(corpus), *TINY_FLAGS, "--out", str(out),
                 "--workers", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "mpiexec, which is not installed" in err[0]


def test_rank_argv_gives_the_command_back():
    """The ranks parse the launcher's flags into the same settings."""
    from glassformer.cli import build_parser
    argv = ["train", "--out", "r", "--max-iters", "7", "--bias", "--lr", "0.5", "--workers", "3",
            "--seed", "4", "--no-progress"]
    args = build_parser().parse_args(argv)
    again = build_parser().parse_args(["train", *launch.rank_argv(args, 3)])
    assert vars(again).keys() == vars(args).keys()
    assert all(getattr(again, k) == getattr(args, k) for k in vars(args) if k != "run")


RANK_FAILS = """
import sys
from mpi4py import MPI
from glassformer.cli.launch import as_rank
def work():
    if MPI.COMM_WORLD.Get_rank() == 1:
        raise RuntimeError("boom on purpose")
    MPI.COMM_WORLD.Barrier()   # rank 0 would wait here forever without the abort
sys.exit(as_rank(MPI.COMM_WORLD, work))
"""


def test_a_crashing_rank_ends_every_rank_with_one_line(tmp_path):
    script = tmp_path / "fails.py"
    script.write_text(RANK_FAILS, encoding="utf-8")
    start = time.time()
    done = subprocess.run([launch.mpiexec_path(), "-n", "2", sys.executable, str(script)],
                          env=ROOT_ENV, capture_output=True, text=True, timeout=60)
    assert done.returncode != 0 and time.time() - start < 30
    lines = [line for line in done.stderr.splitlines() if line.startswith(launch.ERROR_PREFIX)]
    assert lines == [launch.ERROR_PREFIX + "RuntimeError: boom on purpose (rank 1)"]


def test_without_mpi4py_training_runs_here_with_a_notice(corpus, tmp_path, capsys, monkeypatch):
    import glassformer.cli.train as train_command
    monkeypatch.setattr(train_command, "mpi_installed", lambda: False)
    out = tmp_path / "run"
    assert main(["train", "--data", str(corpus), *TINY_FLAGS, "--out", str(out),
                 "--workers", "2", "--max-iters", "2"]) == 0
    notes = [line for line in capsys.readouterr().err.splitlines() if "note:" in line]
    assert len(notes) == 1 and "trains in one process" in notes[0]
    assert sorted(train_losses(out)) == [0, 1]


@pytest.mark.slow
def test_ctrl_c_stops_every_rank_at_a_checkpoint(corpus, tmp_path):
    out = tmp_path / "stopped"
    proc = subprocess.Popen(glassformer("--data", str(corpus), *TINY_FLAGS, "--out", str(out),
                                        "--workers", "2", "--max-iters", "100000"),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            start_new_session=True,  # a terminal's Ctrl-C goes to the group
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.time() + 60
    while not (out / "latest").exists() and time.time() < deadline:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130
    stopped = [line for line in err.splitlines() if "stopped by SIGINT at iteration" in line]
    assert len(stopped) == 1 and "error" not in err and "Traceback" not in err, err
    at = int(stopped[0].split("iteration ")[1].split(";")[0])
    assert load_checkpoint(out).state["iter"] == at
    assert rank_pid(out, 0) is None and rank_pid(out, 1) is None


SAME_STEP = """
import hashlib, json, sys
import numpy as np
from mpi4py import MPI
from glassformer.models import gpt2
from glassformer.train.distributed import data_parallel_step, gather_moments
from glassformer.train.optim import adamw_init
from glassformer.train.step import train_step

comm = MPI.COMM_WORLD
cfg = gpt2.GPT2Config(vocab_size=11, max_seq_len=8, n_layer=2, n_head=2, d_model=16)
ours = gpt2.init_params(cfg, np.random.default_rng(1))
theirs = {k: p.copy() for k, p in ours.items()}
our_opt, their_opt = adamw_init(ours), adamw_init(theirs)
rng = np.random.default_rng(4)
hyper = dict(grad_clip=1e-3, lr=1e-2, beta1=0.9, beta2=0.99, weight_decay=0.1)  # clips every step
worst = 0.0
for step in range(3):
    batches = [(rng.integers(0, 11, (4, 8)), rng.integers(0, 11, (4, 8))) for _ in range(2)]
    our_loss, our_opt, _ = data_parallel_step(comm, gpt2, ours, cfg, batches, our_opt, rng=None,
                                           **hyper)
    their_loss, their_opt, _ = train_step(gpt2, theirs, cfg, batches, their_opt, rng=None, **hyper)
    worst = max(worst, abs(our_loss - their_loss) / their_loss)
same_params = comm.allgather(hashlib.sha256(b"".join(ours[k].tobytes() for k in sorted(ours)))
                             .hexdigest())
gather_moments(comm, ours, our_opt)   # each group's moments stay with its rank until a save
digest = hashlib.sha256()
for k in sorted(ours):
    for a in (ours[k], our_opt.m[k], our_opt.v[k]):
        digest.update(a.tobytes())
params_off = max(float(np.abs(ours[k] - theirs[k]).max()) for k in ours)
digests = comm.allgather(digest.hexdigest())
if comm.Get_rank() == 0:
    print(json.dumps({"same_on_every_rank": len(set(digests)) == 1 == len(set(same_params)),
                      "loss_rel": worst,
                      "params_abs": params_off, "t": our_opt.t}))
"""


def test_a_data_parallel_step_is_the_step_and_every_rank_holds_the_same_state(tmp_path):
    """Accumulation and clipping over 2 ranks: the losses and params of one process, and
    bit-identical params and AdamW moments on both ranks."""
    script = tmp_path / "same_step.py"
    script.write_text(SAME_STEP, encoding="utf-8")
    done = subprocess.run([launch.mpiexec_path(), "-n", "2", sys.executable, str(script)],
                          env=ROOT_ENV, capture_output=True, text=True, timeout=120, check=True)
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["same_on_every_rank"] and result["t"] == 3
    assert result["loss_rel"] < SAME_LOSS_RTOL
    assert result["params_abs"] < 1e-5   # lr 1e-2 steps: float32 rounding of the summed grads


TANG = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "tang_poems.txt"
HELD = ("pos_emb", "blocks.0.attn.wq", "blocks.0.attn.bq", "blocks.0.attn.wk", "blocks.0.attn.bk")


def test_two_ranks_hold_the_neighbour_heads_still(tmp_path):
    """TrainConfig.hold_iters on 2 ranks: each rank's AdamW group leaves the held keys as they
    were (zero grads before the reduce-scatter, no decay), and the rest trains."""
    if not TANG.is_file():
        pytest.skip(f"corpus {TANG} is absent")
    poems = tmp_path / "poems.txt"
    with TANG.open(encoding="utf-8") as f:
        poems.write_text("".join(next(f) for _ in range(120)), encoding="utf-8")
    out = tmp_path / "held"
    flags = ["--arch", "bert", "--objective", "mlm", "--n-layer", "1", "--n-head", "2",
             "--d-model", "32", "--block-size", "16", "--batch-size", "4", "--eval-iters", "2",
             "--warmup-iters", "2", "--eval-interval", "3", "--hold-iters", "3", "--no-progress"]
    assert main(["train", "--data", str(poems), "--out", str(out), *flags, "--workers", "1",
                 "--max-iters", "0"]) == 0
    start = load_checkpoint(out)
    subprocess.run(glassformer("--out", str(out), "--resume", "--max-iters", "3", "--workers",
                               "2", "--no-progress"), check=True, capture_output=True)
    held = load_checkpoint(out)
    assert all((held.params[k] == start.params[k]).all() for k in HELD)
    assert not (held.params["blocks.0.attn.wv"] == start.params["blocks.0.attn.wv"]).all()
