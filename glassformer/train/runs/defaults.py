"""Defaults give way to what was typed: a new run's settings made to hold together.

A recipe's default that cannot hold with the flags a person typed adapts, and says so in one
line; only two flags that were both typed can conflict, and that refusal names both.

    max_iters ≥ warmup_iters     a run warms up within its length (else a tenth of the run);
                                 a run of 0 iterations, which only evaluates, has no length
    lr_decay_iters > warmup      the cosine decay starts where the warmup ends
    eval_interval ≤ max_iters    the saved settings say what a short run does (it evaluates at
                                 its start and its end either way, so this one is not said)
    block_size ≤ the context     a fine-tuning window fits the pretrained model's positions

`glassformer finetune --model smollm2 --data D --max-iters 1`, the first thing anyone runs to see
that it works, therefore trains with no warmup instead of refusing the recipe's --warmup-iters 10.
Resumed runs keep their saved settings (train/runs/checks.py's resumed_config).
"""
from __future__ import annotations

import dataclasses

from glassformer.errors import GlassformerError
from glassformer.train.loop import TrainConfig, flag_of


def both_typed(first: str, first_value, second: str, second_value, why: str) -> GlassformerError:
    """The one refusal left: two typed flags that cannot hold together."""
    return GlassformerError(f"{flag_of(first)} {first_value} and {flag_of(second)} "
                            f"{second_value} were both given, and {why}: change one of them")


def fit_defaults(cfg: TrainConfig, typed: frozenset, *, context: int | None = None,
                 decay_spans_run: bool = False) -> tuple[TrainConfig, list[str]]:
    """(the settings with every untyped default that conflicts adapted, one note per change).

    typed: the TrainConfig fields given on the command line. context: the model's positions
    (a pretrained model's; None when the block size makes the context). decay_spans_run: a
    typed --max-iters also ends the cosine decay unless --lr-decay-iters was typed (finetune's
    rule: its recipe's decay ends with its run)."""
    changes: dict[str, int] = {}
    notes: list[str] = []

    def adapt(name: str, value: int, why: str) -> None:
        notes.append(f"note: {flag_of(name)} {getattr(cfg, name)} (a default) {why}: "
                     f"using {value}")
        changes[name] = value

    def now(name: str) -> int:
        return changes.get(name, getattr(cfg, name))

    if decay_spans_run and "max_iters" in typed and "lr_decay_iters" not in typed:
        changes["lr_decay_iters"] = cfg.max_iters      # the decay spans the run given (silent)
    if cfg.warmup_iters > cfg.max_iters > 0:   # (a run of 0 steps only evaluates)
        if {"warmup_iters", "max_iters"} <= typed:
            raise both_typed("warmup_iters", cfg.warmup_iters, "max_iters", cfg.max_iters,
                             "the warmup would be longer than the run")
        if "warmup_iters" in typed:
            adapt("max_iters", cfg.warmup_iters, f"is shorter than --warmup-iters "
                                                 f"{cfg.warmup_iters}")
        else:
            warmup = max(cfg.max_iters // 10, 1 if cfg.schedule == "inverse-sqrt" else 0)
            adapt("warmup_iters", warmup, f"is longer than the run's --max-iters "
                                          f"{cfg.max_iters}; a tenth of the run")
    if cfg.schedule == "cosine" and now("lr_decay_iters") <= now("warmup_iters"):
        if {"warmup_iters", "lr_decay_iters"} <= typed:
            raise both_typed("warmup_iters", cfg.warmup_iters, "lr_decay_iters",
                             cfg.lr_decay_iters, "the cosine decay must end after the warmup")
        if "warmup_iters" in typed or "lr_decay_iters" not in typed:
            decay = max(now("max_iters"), now("warmup_iters") + 1)
            changes.pop("lr_decay_iters", None)
            adapt("lr_decay_iters", decay, f"must end after the warmup of "
                                           f"{now('warmup_iters')} iterations")
        else:
            adapt("warmup_iters", now("lr_decay_iters") // 10,
                  f"must end before --lr-decay-iters {cfg.lr_decay_iters}; a tenth of it")
    if "eval_interval" not in typed and 1 <= now("max_iters") < cfg.eval_interval:
        # silent: the loop evaluates at the run's end anyway, so the runs are the same
        changes["eval_interval"] = now("max_iters")
    if context is not None and "block_size" not in typed and cfg.block_size > context:
        adapt("block_size", context, f"is longer than the model's context of {context} "
                                     "positions")
    return dataclasses.replace(cfg, **changes), notes


def noted_first(notes: list[str], on_note, on_start):
    """on_start for the loop, saying the notes first: a default's change is told once the run
    truly starts (every setting and the data checked), so a refused run prints its one line
    alone."""
    def start(*args) -> None:
        for note in notes:
            if on_note:
                on_note(note)
        if on_start:
            on_start(*args)
    return start
