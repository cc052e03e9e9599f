"""Adding an objective is one Objective record and one registry line (CONTRIBUTING.md, "Adding an
objective"): a toy objective registered here, and nowhere else, trains through `glassformer
train --objective`, checkpoints and resumes like any other."""
from functools import partial

import numpy as np

from glassformer.cli import main
from glassformer.io.checkpoint import load_checkpoint, read_train_log
from glassformer.models.family import CAUSAL
from glassformer.ops.cross_entropy import IGNORE_INDEX
from glassformer.train.data import get_batch
from glassformer.train.objectives import OBJECTIVES
from glassformer.train.objectives.objective import (TEXT, Objective, check_kind,
                                                    token_eval_loss, token_loss_and_grads)

TINY = ["--n-layer", "1", "--n-head", "2", "--d-model", "32", "--block-size", "16",
        "--batch-size", "8", "--eval-iters", "2", "--eval-interval", "10", "--lr", "0.01",
        "--warmup-iters", "2", "--lr-decay-iters", "40", "--workers", "1", "--no-progress"]
LEARNED = 0.5  # nats: 40 steps take the val loss from uniform (ln 65 = 4.2) to about 3.2


def draw_previous(data: np.ndarray, train_cfg, rng: np.random.Generator, *, split="data",
                  step=0, shuffle=True):
    """Windows of the stream; the target at t is the token at t - 1 (nothing at t = 0)."""
    x, _ = get_batch(data, train_cfg.batch_size, train_cfg.block_size, rng, split=split)
    y = np.concatenate([np.full((x.shape[0], 1), IGNORE_INDEX), x[:, :-1]], axis=1)  # (B, T)
    return x, y


def the_stream(ids, tokenizer):
    return ids


PREVIOUS_TOKEN = Objective(name="previous-token", kind=CAUSAL, reads=TEXT, draw=draw_previous,
                           loss_and_grads=token_loss_and_grads, eval_loss=token_eval_loss,
                           check=partial(check_kind, CAUSAL), prepare=the_stream)


def test_a_toy_objective_registered_alone_trains_and_resumes(corpus, tmp_path, monkeypatch):
    monkeypatch.setitem(OBJECTIVES, PREVIOUS_TOKEN.name, PREVIOUS_TOKEN)   # the registry line
    out = tmp_path / "toy"
    args = ["train", "--data", str(corpus), "--out", str(out), "--objective", "previous-token",
            *TINY]
    assert main([*args, "--max-iters", "20"]) == 0
    assert load_checkpoint(out).state["train_config"]["objective"] == "previous-token"
    assert main(["train", "--out", str(out), "--resume", "--max-iters", "40",
                 "--no-progress"]) == 0
    vals = [r["val_loss"] for r in read_train_log(out) if "val_loss" in r]
    assert len(vals) == 5 and vals[-1] < vals[0] - LEARNED   # it learned from its own batches
    # the objective also needs nothing else: a masked-LM BERT cannot take it
    assert main(["train", "--data", str(corpus), "--out", str(tmp_path / "no"), "--arch", "bert",
                 "--objective", "previous-token", *TINY]) == 2
