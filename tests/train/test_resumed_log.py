"""A resumed run's log holds each iteration once (issue 49): what a run killed with SIGKILL logged
past its last checkpoint is dropped, and the record at the checkpoint keeps the evaluation made
there, merged with the step the resumed run does again."""
import json
import signal

from glassformer.cli import main
from glassformer.io.checkpoint import load_checkpoint, read_train_log
from tests.train.test_runs import trainer, wait_for

EVERY = 5


def checkpoint_then_more(out):
    """True when the latest checkpoint is past iteration 0 and the log holds its record and two
    iterations past it."""
    try:
        at = load_checkpoint(out).state["iter"]
        rows = read_train_log(out)
    except Exception:   # noqa: BLE001 - a save in progress: ask again
        return False
    return (at > 0 and any(r["iter"] == at and "val_loss" in r for r in rows)
            and max(r["iter"] for r in rows) >= at + 2)


def test_a_resume_after_kill_9_logs_each_iteration_once(corpus, tmp_path):
    out = tmp_path / "run"
    first = trainer(corpus, out, "--max-iters", "100000", "--eval-interval", str(EVERY))
    try:
        wait_for(lambda: (out / "latest").is_file())
        while True:   # stopped where the log is past the checkpoint, then killed there
            first.send_signal(signal.SIGSTOP)
            if checkpoint_then_more(out):
                break
            first.send_signal(signal.SIGCONT)
            wait_for(lambda: checkpoint_then_more(out))
    finally:
        first.kill()
    first.communicate(timeout=30)
    at = load_checkpoint(out).state["iter"]
    killed = {r["iter"]: r for r in read_train_log(out) if "train_loss" in r}
    assert max(killed) > at                       # it had logged past its checkpoint
    end = at + EVERY
    assert main(["train", "--out", str(out), "--resume", "--max-iters", str(end),
                 "--no-progress"]) == 0
    lines = (out / "train_log.jsonl").read_text(encoding="utf-8").splitlines()
    rows = [json.loads(line) for line in lines]
    steps = [r for r in rows if "train_loss" in r]
    assert [r["iter"] for r in steps] == list(range(end))      # once each, in order
    evals = [r["iter"] for r in rows if "val_loss" in r]
    assert evals == list(range(0, end + 1, EVERY))               # the one at `at` kept
    merged = next(r for r in steps if r["iter"] == at)
    assert merged["val_loss"] == killed[at]["val_loss"]
    assert merged["train_loss"] == killed[at]["train_loss"]      # the same step, done again
