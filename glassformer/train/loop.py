"""The training loop: batches, AdamW with warmup + cosine decay, clipping, accumulation, eval,
atomic checkpoints, a JSONL log, and exact resume.

Order of one run (nanoGPT's, with the checkpoint made part of the eval):

    for it in start .. max_iters:
        if it is an eval iteration (it % eval_interval == 0, or it == max_iters):
            estimate train/val loss; save a checkpoint (params, AdamW moments, RNG states, iter)
        if it == max_iters: stop
        grad_accum micro-batches -> summed grads -> clip by global norm -> AdamW step at lr(it)

Exact resume: the training batches and dropout draw from their own generators, whose states are
saved; eval batches come from a generator seeded by (seed, it), so evaluating never moves the
training stream. A run stopped at N and resumed to 2N therefore gives the same losses as one run
straight to 2N. A run killed between checkpoints loses only the iterations since the last one.
"""
from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from glassformer.errors import GlassformerError, check_choice
from glassformer.io.checkpoint import (append_train_log, rng_from_json, rng_to_json,
                                       save_checkpoint, trim_train_log)
from glassformer.models.registry import family as family_of
from glassformer.train.optim import AdamWState, adamw_init
from glassformer.train.objectives import objective_of
from glassformer.train.objectives.objective import Objective
from glassformer.train.objectives.settings import Settings, flag_of
from glassformer.train.schedule import SCHEDULES, scheduled_lr
from glassformer.train.step import IN_PROCESS, Steps


@dataclass(frozen=True)
class TrainConfig:
    """The loop's settings, and the objective's own (objective_settings: its Settings record,
    train/objectives/settings.py). Defaults: nanoGPT's Shakespeare-char recipe as its README
    runs it on a CPU."""
    batch_size: int = 12          # B, sequences per micro-batch
    block_size: int = 64          # T, tokens per sequence
    grad_accum: int = 1           # micro-batches per optimizer step
    lr: float = 1e-3              # peak learning rate
    min_lr: float = 1e-4          # floor of the cosine decay
    warmup_iters: int = 100       # linear warmup length
    lr_decay_iters: int = 2000    # cosine decay reaches min_lr here
    max_iters: int = 2000         # optimizer steps in all
    weight_decay: float = 0.1     # decoupled, matrices only
    beta1: float = 0.9            # AdamW
    beta2: float = 0.99           # AdamW (nanoGPT's char recipe)
    grad_clip: float = 1.0        # global grad-norm clip (0: off)
    eval_interval: int = 250      # evaluate and checkpoint every this many iterations
    eval_iters: int = 20          # batches per loss estimate
    seed: int = 1337              # seeds init, batches and dropout
    workers: int = 1              # ranks the run trains on (recorded; train/distributed.py)
    label_smoothing: float = 0.0  # cross-entropy label smoothing (0: none)
    schedule: str = "cosine"      # learning rate: "cosine" (nanoGPT) or "inverse-sqrt" (the paper)
    hold_iters: int = 0           # held_keys stay still for this many iterations
    held_keys: str = ""           # comma-separated params a recipe holds still (its init's)
    objective: str = "next-token"  # what the run learns: a name in train/objectives/
    objective_settings: Settings | None = None   # its settings (None: the objective's defaults)

    def __post_init__(self):
        # note: errors name the command-line flag of each field (flag_of), what users typed
        for name in ("batch_size", "block_size", "grad_accum", "eval_interval", "eval_iters"):
            if getattr(self, name) < 1:
                raise GlassformerError(f"{flag_of(name)} must be at least 1, got "
                                       f"{getattr(self, name)}")
        for name in ("max_iters", "hold_iters"):
            if getattr(self, name) < 0:
                raise GlassformerError(f"{flag_of(name)} must be >= 0, got {getattr(self, name)}")
        if self.workers < 0:  # 0: "one per core" in runs saved before MPI
            raise GlassformerError(f"--workers must be >= 1, got {self.workers}")
        check_choice("--schedule", self.schedule, SCHEDULES)
        if self.schedule == "inverse-sqrt" and self.warmup_iters < 1:
            raise GlassformerError("--schedule inverse-sqrt needs --warmup-iters 1 or more")
        if not 0.0 <= self.label_smoothing < 1.0:
            raise GlassformerError(f"--label-smoothing must be in [0, 1), got "
                                   f"{self.label_smoothing}")
        own = objective_of(self.objective).settings
        if self.objective_settings is None:
            object.__setattr__(self, "objective_settings", own())   # the objective's defaults
        elif type(self.objective_settings) is not own:
            raise GlassformerError(f"--objective {self.objective} takes {own.__name__}, got "
                                   f"{type(self.objective_settings).__name__}")

    def to_dict(self) -> dict:
        """JSON-ready: the loop's fields, the objective's settings as a dict of their own."""
        return dataclasses.asdict(self)


@dataclass
class RunState:
    """What the loop carries from one iteration to the next (all of it saved in checkpoints)."""
    params: dict
    opt: AdamWState
    it: int
    batch_rng: np.random.Generator
    dropout_rng: np.random.Generator
    best_val: float = math.inf


def new_run(model_cfg, train_cfg: TrainConfig, params: dict | None = None,
            after_init: Callable | None = None) -> RunState:
    """Fresh run: params from the family's init (or given, for fine-tuning), zero moments.

    after_init(params, cfg, rng) -> params: a recipe's own init, run after the family's with the
    same generator (train/recipes/: the Tang BERT's neighbour heads).
    """
    root = np.random.SeedSequence(train_cfg.seed)
    init_seed, batch_seed, dropout_seed = root.spawn(3)
    if params is None:
        arch = model_cfg.to_dict()["arch"]
        init_rng = np.random.default_rng(init_seed)
        params = family_of(arch).init_params(model_cfg, init_rng)
        if after_init is not None:
            params = after_init(params, model_cfg, init_rng)   # after every draw of init_params
    return RunState(params=params, opt=adamw_init(params), it=0,
                    batch_rng=np.random.default_rng(batch_seed),
                    dropout_rng=np.random.default_rng(dropout_seed))


def resume_run(ckpt) -> RunState:
    """The RunState saved in a loaded checkpoint (glassformer.io.checkpoint.load_checkpoint)."""
    state = ckpt.state
    if ckpt.optimizer is None:
        raise GlassformerError(f"{ckpt.path} has no optimizer state, so it cannot be resumed; "
                               "use it with --init to start a new run from its weights")
    return RunState(params=ckpt.params, opt=AdamWState(**ckpt.optimizer), it=int(state["iter"]),
                    batch_rng=rng_from_json(state["batch_rng"]),
                    dropout_rng=rng_from_json(state["dropout_rng"]),
                    best_val=float(state.get("best_val", math.inf)))


def _save(out_dir, model_cfg, train_cfg, run: RunState, tokenizer_json) -> None:
    state = {"iter": run.it, "best_val": run.best_val, "train_config": train_cfg.to_dict(),
             "batch_rng": rng_to_json(run.batch_rng), "dropout_rng": rng_to_json(run.dropout_rng)}
    save_checkpoint(out_dir, config=model_cfg.to_dict(), params=run.params,
                    optimizer=run.opt._asdict(), state=state, tokenizer_json=tokenizer_json)


def estimate_loss(steps: Steps, family, params: dict, cfg, data, *, iters: int,
                  train_cfg: TrainConfig, objective: Objective, rng: np.random.Generator,
                  split: str, frozen: dict | None = None, batches: list | None = None) -> float:
    """Mean loss over `iters` batches of `data`, as nanoGPT's estimate_loss: random windows of a
    token stream, a record dataset's first `iters` batches in order (datasets/epochs.py).

    batches: a list that receives each (x, y) drawn, when the caller wants them too."""
    losses = []
    for index in range(iters):
        x, y = objective.draw(data, train_cfg, rng, split=split, step=index, shuffle=False)
        if batches is not None:
            batches.append((x, y))
        losses.append(steps.eval_loss(family, params, cfg, x, y, objective=objective,
                                      train_cfg=train_cfg, frozen=frozen))
    return float(np.mean(losses))


def _evaluate(steps: Steps, family, model_cfg, train_cfg: TrainConfig, objective: Objective,
              run: RunState, train_data, val_data, frozen: dict | None) -> dict:
    """{"eval_train_loss", "val_loss"} at run.it, from batches seeded by (seed, it), and what
    the objective's eval_stats adds from the val batches (computed in this process)."""
    evals = {}
    val_batches = []
    for split, data in (("train", train_data), ("val", val_data)):
        eval_rng = np.random.default_rng([train_cfg.seed, run.it])
        evals[split] = estimate_loss(steps, family, run.params, model_cfg, data,
                                     iters=train_cfg.eval_iters, train_cfg=train_cfg,
                                     objective=objective, rng=eval_rng, split=split, frozen=frozen,
                                     batches=val_batches if split == "val" else None)
    record = {"eval_train_loss": evals["train"], "val_loss": evals["val"]}
    if objective.eval_stats is not None:
        record.update(objective.eval_stats(family, run.params, model_cfg, val_batches,
                                           train_cfg=train_cfg, frozen=frozen))
    return record


def _optimizer_step(steps: Steps, family, model_cfg, train_cfg: TrainConfig, objective: Objective,
                    run: RunState, train_data, lr: float, frozen: dict | None
                    ) -> tuple[float, dict]:
    """grad_accum micro-batches, clip, AdamW. Returns the mean micro-batch loss and the
    objective's metrics ({} for most)."""
    # micro-batch k of the run is the k-th of a record dataset's shuffled epochs
    # (datasets/epochs.py), so a resumed run draws the batches of the uninterrupted one
    micro_batches = [objective.draw(train_data, train_cfg, run.batch_rng, split="train",
                                    step=run.it * train_cfg.grad_accum + j, shuffle=True)
                     for j in range(train_cfg.grad_accum)]
    result = steps.train_step(family, run.params, model_cfg, micro_batches, run.opt,
                              rng=run.dropout_rng, grad_clip=train_cfg.grad_clip, lr=lr,
                              beta1=train_cfg.beta1, beta2=train_cfg.beta2,
                              weight_decay=train_cfg.weight_decay, objective=objective,
                              train_cfg=train_cfg, frozen=frozen,
                              held=held_at(train_cfg, run.it))
    loss, run.opt, metrics = result
    return loss, metrics


def held_at(train_cfg: TrainConfig, it: int) -> frozenset:
    """The params held still at iteration `it`: train_cfg.held_keys for the first
    train_cfg.hold_iters iterations, none after."""
    if it >= train_cfg.hold_iters or not train_cfg.held_keys:
        return frozenset()
    return frozenset(train_cfg.held_keys.split(","))


def _log(steps: Steps, out_dir, record: dict, on_step, earlier: dict) -> None:
    """One iteration's record into the log and the progress bar (by the process that writes);
    earlier: what a killed run logged for this iteration, which the log keeps under `record`."""
    if steps.writes_files:
        append_train_log(out_dir, {**earlier, **record})
        if on_step:
            on_step(record)


def check_context(model_cfg, train_cfg: TrainConfig) -> None:
    """The training windows fit the model's context: block size <= max_seq_len (checked before a
    run folder is written, and again by the loop)."""
    if model_cfg.max_seq_len < train_cfg.block_size:
        raise GlassformerError(f"block size {train_cfg.block_size} is longer than the model's "
                               f"context max_seq_len={model_cfg.max_seq_len}: give --block-size "
                               f"{model_cfg.max_seq_len} or less")


def train(model_cfg, train_cfg: TrainConfig, run: RunState, *, train_data: np.ndarray,
          val_data: np.ndarray, out_dir: str | Path, tokenizer_json: dict,
          on_step: Callable[[dict], None] | None = None,
          should_stop: Callable[[], bool] | None = None,
          steps: Steps = IN_PROCESS, val_tokens_per_byte: float | None = None,
          frozen: dict | None = None, objective: Objective | None = None) -> RunState:
    """Run from `run.it` to `train_cfg.max_iters`, logging and checkpointing into `out_dir`.

    on_step(record) is called after each logged record (the CLI's progress bar uses it).
    should_stop() is asked once per iteration; when it says True (Ctrl-C, SIGTERM: see
    train/runs/signals.py) the run checkpoints the iteration it is at and returns early.
    steps: how a step and an eval loss are computed (train/step.py); a data-parallel run passes
    train/distributed.py's, and then only the process with steps.writes_files writes anything.
    val_tokens_per_byte: the val split's tokens per UTF-8 byte; when given, each eval also logs
    val_bpb = val_loss / ln 2 * tokens per byte (bits per byte: comparable across tokenizers).
    frozen: weights the forward reads but training never updates (a LoRA run's base model);
    run.params, the moments and the checkpoints hold only what trains.
    objective: the Objective train_cfg.objective names, resolved once where the run starts and
    passed on (None: looked up here, as a follower rank of a data-parallel run does, which
    learns the settings from rank 0); the batches and the loss come from it.
    """
    # every rank of a data-parallel run starts from rank 0's run and data (one process: as is)
    model_cfg, train_cfg, run, train_data, val_data, frozen = steps.start(
        model_cfg, train_cfg, run, train_data, val_data, frozen or {})
    family = family_of(model_cfg.to_dict()["arch"])
    if objective is None:
        objective = objective_of(train_cfg.objective)
    check_context(model_cfg, train_cfg)
    writes = steps.writes_files
    # drop records a killed run logged past its save; its record at the save (the evaluation
    # made there, and a step done again below) is logged again with this run's first record
    carried = trim_train_log(out_dir, max_iter=run.it) if writes else {}
    resumed_at = run.it if run.it > 0 else None
    while True:
        it = run.it
        record = {"iter": it}
        earlier = carried if it == resumed_at else {}
        is_eval = it % train_cfg.eval_interval == 0 or it == train_cfg.max_iters
        if is_eval and it != resumed_at:
            record.update(_evaluate(steps, family, model_cfg, train_cfg, objective, run,
                                    train_data, val_data, frozen))
            run.best_val = min(run.best_val, record["val_loss"])
            if val_tokens_per_byte:
                record["val_bpb"] = record["val_loss"] / math.log(2) * val_tokens_per_byte
            steps.full_state(run.params, run.opt)   # every process: the moments to the writer
            if writes:
                _save(out_dir, model_cfg, train_cfg, run, tokenizer_json)
        # issue 21 (stop on request): checkpoint this iteration unless it was just saved or
        # resumed from, then return as at the end
        stopping = should_stop is not None and should_stop()
        if stopping and not is_eval and it != resumed_at:
            steps.full_state(run.params, run.opt)   # every process (the stop is agreed)
            if writes:
                _save(out_dir, model_cfg, train_cfg, run, tokenizer_json)
        if it >= train_cfg.max_iters or stopping:
            if len(record) > 1 or earlier:
                _log(steps, out_dir, record, on_step, earlier)
            return run
        lr = scheduled_lr(train_cfg.schedule, it, lr=train_cfg.lr, min_lr=train_cfg.min_lr,
                          warmup_iters=train_cfg.warmup_iters,
                          lr_decay_iters=train_cfg.lr_decay_iters)
        start = time.perf_counter()
        loss, metrics = _optimizer_step(steps, family, model_cfg, train_cfg, objective, run,
                                        train_data, lr, frozen)
        if not math.isfinite(loss):
            raise GlassformerError(f"training diverged at iteration {it}: loss is {loss}; "
                                   "try a lower --lr")
        record.update(lr=lr, train_loss=loss, ms_per_iter=(time.perf_counter() - start) * 1e3)
        record.update(metrics)
        run.it = it + 1
        _log(steps, out_dir, record, on_step, earlier)
