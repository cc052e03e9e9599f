"""`glassformer finetune`: LoRA (or full) fine-tuning of a pretrained model on chat or text data.

The defaults are the Tang SFT recipe (train/recipes/, docs/finetune.md): SmolLM2-135M-Instruct
learns to write Tang quatrains from ../shared/data/tang_sft.jsonl in about half an hour on two
CPU cores.
"""
from __future__ import annotations

import sys
from functools import partial
from typing import NamedTuple

from glassformer.cli.common import (TRAIN_FLAGS, add_template_budget_arguments,
                                    given_train_flags, model_help, run_ended, template_budget)
from glassformer.cli.settings_flags import add_settings_arguments, given_settings
from glassformer.cli.launch import as_rank, launch_ranks, lead_or_follow
from glassformer.errors import GlassformerError
from glassformer.io.lora_modules import ALL_LINEAR
from glassformer.io.peft import LoraConfig
from glassformer.packaged import MODEL, resolve_path
from glassformer.train.distributed import (agreed_stop, check_shards, mpi_comm,
                                           mpi_installed, training_steps, usable_cores)
from glassformer.train.loop import TrainConfig
from glassformer.train.objectives import objective_of
from glassformer.train.objectives.ranks import check_whole_units
from glassformer.train.recipes import FINETUNE_RECIPES, TANG_SFT, recipe_train_config
from glassformer.train.runs.finetune import resume_finetune, run_finetune
from glassformer.train.runs.folder import saved_train_config
from glassformer.train.runs.progress import progress_printer
from glassformer.train.runs.signals import stop_on_signals

NAME = "finetune"
HELP = ("fine-tune a pretrained causal LM on chat JSONL (loss on the replies) or text: LoRA "
        "adapters saved in PEFT's format, or --full")

DEFAULTS = TrainConfig()
LORA_RECIPE = TANG_SFT.lora
# train's flags that finetune does not take: only a new BERT has neighbour heads to hold
NOT_HERE = ("hold_iters",)
# --workers: unlike train, the default is one process (BLAS on every core, docs/finetune.md)
WORKERS_HELP = ("batch shards trained in parallel, each in its own MPI rank (the LoRA "
                "adapters' AdamW split over the ranks, ZeRO-1; docs/distributed.md; default: 1, "
                "one process with BLAS on every core)")
# flag -> (LoraConfig field, type, help)
LORA_FLAGS = {
    "--lora-r": ("r", int, "LoRA rank r"),
    "--lora-alpha": ("alpha", float, "LoRA alpha; the update is scaled by alpha / r"),
    "--lora-dropout": ("dropout", float, "dropout on the adapters' input"),
}
RESUME_HELP = ("continue the run in --out from its last checkpoint, with its own base model, "
               "LoRA and settings; only --max-iters, --eval-interval, --lr-decay-iters, "
               "--min-lr and --workers may be changed")


def add_arguments(parser) -> None:
    # note: the training flags default to None, so a resume can tell the ones given
    parser.set_defaults(seed=None)
    parser.add_argument("--model", default=None,
                        help=model_help("the pretrained causal LM to fine-tune (gpt2 or llama "
                                        "family); on --resume, the run's own"))
    parser.add_argument("--data", default=None,
                        help="training data: .jsonl chat conversations ({\"messages\": [...]} a "
                             "line, loss on the assistant's replies) or a UTF-8 text file (loss "
                             "everywhere); on --resume, the run's own")
    parser.add_argument("--out", required=True, help="run folder (checkpoints, log, adapter)")
    for flag, (field, kind, text) in LORA_FLAGS.items():
        default = getattr(LORA_RECIPE, field)
        parser.add_argument(flag, type=kind, default=None, help=f"{text} (default: {default:g})")
    parser.add_argument("--rslora", action="store_true", default=None,
                        help="scale by alpha / sqrt(r) (rank-stabilized LoRA)")
    parser.add_argument("--target", default=None,
                        help="comma-separated PEFT module names to adapt (default: all-linear, "
                             "every linear layer of the blocks as the model's family names them: "
                             "LLaMA q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj; "
                             "GPT-2 c_attn,c_proj,c_fc)")
    parser.add_argument("--adapter", default=None,
                        help="continue training this PEFT LoRA adapter folder (a finetune run's, "
                             "or peft's) instead of fresh adapters; its LoRA settings are kept")
    parser.add_argument("--full", action="store_true", default=None,
                        help="train every weight instead of LoRA adapters")
    parser.add_argument("--objective", choices=list(FINETUNE_RECIPES), default=None,
                        help="what to learn, each from its recipe's settings: "
                             + ", ".join(f"{name} ({recipe.name})"
                                         for name, recipe in FINETUNE_RECIPES.items())
                             + "; default: sft for chat JSONL, next-token for a text file")
    add_template_budget_arguments(parser)
    parser.add_argument("--resume", action="store_true", help=RESUME_HELP)
    parser.add_argument("--allow-new-data", action="store_true",
                        help="on --resume, train on a data file that differs from the run's")
    for flag, (field, kind, text) in TRAIN_FLAGS.items():
        if field in NOT_HERE:
            continue
        if field == "workers":
            parser.add_argument(flag, type=kind, default=None, help=WORKERS_HELP)
            continue
        parser.add_argument(flag, type=kind, default=None, help=f"{text} ({recipe_default(field)})")
    add_settings_arguments(parser, finetune_objectives(), FINETUNE_RECIPES)
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def recipe_default(field: str) -> str:
    """'default: 256 (tang-sft), 160 (tang-dpo, tang-grpo)' for a setting the recipes give,
    each --objective's recipe named; 'default: 1' for the loop's own default (nanoGPT's)."""
    values: dict = {}
    for recipe in FINETUNE_RECIPES.values():
        if field in recipe.train:
            values.setdefault(recipe.train[field], []).append(recipe.name)
    if not values:
        return f"default: {getattr(DEFAULTS, field)}"
    shown = ", ".join(f"{value} ({', '.join(names)})" for value, names in values.items())
    return f"default: {shown}, the recipes'"


def finetune_objectives() -> list:
    """The objectives `finetune --objective` offers: one per fine-tuning recipe."""
    return [objective_of(name) for name in FINETUNE_RECIPES]


def say(line: str) -> None:
    print(f"glassformer finetune: {line}", file=sys.stderr)


def lora_config(args) -> LoraConfig | None:
    """The LoRA settings from the flags (None with --full)."""
    if args.full:
        return None
    targets = LORA_RECIPE.targets
    if args.target is not None:
        targets = tuple(name.strip() for name in args.target.split(",") if name.strip())
        targets = ALL_LINEAR if targets == (ALL_LINEAR,) else targets
        if not targets:
            raise GlassformerError("--target needs at least one module name, e.g. "
                                   "q_proj,v_proj")
    return LoraConfig(r=LORA_RECIPE.r if args.lora_r is None else args.lora_r,
                      alpha=LORA_RECIPE.alpha if args.lora_alpha is None else args.lora_alpha,
                      dropout=(LORA_RECIPE.dropout if args.lora_dropout is None
                               else args.lora_dropout),
                      targets=targets, rslora=bool(args.rslora))


def check_flags(args) -> None:
    """What only the command line can get wrong."""
    template_budget(args)   # a limit below 1: one line, before anything is loaded
    if args.workers is not None and args.workers < 1:
        raise GlassformerError(f"--workers must be at least 1, got {args.workers} (leave it out "
                               "to train in one process)")
    lora_flags = [flag for flag, value in (("--lora-r", args.lora_r), ("--lora-alpha",
                  args.lora_alpha), ("--lora-dropout", args.lora_dropout), ("--target",
                  args.target), ("--rslora", args.rslora)) if value is not None]
    if args.resume:
        fixed = lora_flags + [flag for flag, value in (("--model", args.model),
                                                       ("--full", args.full),
                                                       ("--adapter", args.adapter),
                                                       ("--objective", args.objective)) if value]
        if fixed:
            raise GlassformerError(f"--resume keeps the run's model and LoRA: drop {fixed[0]}")
        return
    if args.allow_new_data:
        raise GlassformerError("--allow-new-data only applies to --resume")
    if args.model is None or args.data is None:
        raise GlassformerError("a new fine-tuning run needs --model and --data")
    if args.full and lora_flags:
        raise GlassformerError(f"--full trains every weight, so {lora_flags[0]} does not apply")
    if args.adapter is not None and (args.full or lora_flags):
        flag = "--full" if args.full else lora_flags[0]
        raise GlassformerError(f"--adapter continues the adapter with its own LoRA settings, "
                               f"so {flag} does not apply")
    resolve_path(args.model, MODEL)   # a missing model or package: one line, nothing loaded


def run(args) -> int:
    check_flags(args)
    # --workers N > 1 starts N ranks through mpiexec (as train does); under mpiexec this is one
    comm = mpi_comm()
    if comm is not None:
        return as_rank(comm, partial(finetune_as_rank, args, comm))
    request = request_of(args)
    workers = args.workers or (request.train_cfg.workers if args.resume else 1)
    if workers > 1:
        batch_size = args.batch_size or request.train_cfg.batch_size
        check_whole_units(objective_of(request.train_cfg.objective), batch_size, workers)
        check_shards(batch_size, workers)
        if workers > usable_cores():
            raise GlassformerError(f"--workers {workers} is more than the {usable_cores()} "
                                   "usable cores here; give at most that many")
        if mpi_installed():
            return launch_ranks(args, workers, command_name=NAME)
        say(f"note: mpi4py is not installed here, so --workers {workers} trains in one process "
            "(docs/distributed.md)")
    return finetune_here(args, request)


class Request(NamedTuple):
    """What the command line asks of a run, read once: the settings typed (the loop's and the
    objective's, each as field -> value) and the settings the run starts from."""
    given: dict               # TrainConfig fields typed
    settings: dict            # the objective's settings typed (cli/settings_flags.py)
    train_cfg: TrainConfig    # a new run's: its recipe's with both on top; a resume's: saved


def request_of(args, comm=None) -> Request:
    """The Request of these flags; one line for a flag of another objective than the run's (a
    new run's --objective, sft by default; a resumed run's own). Without comm (one process),
    --workers is not a setting the run records."""
    given = given_train_flags(args, skip=NOT_HERE)
    if comm is None:
        given.pop("workers", None)
    saved = saved_settings(args.out) if args.resume else None
    name = saved.objective if saved else args.objective or TANG_SFT.objective
    settings = given_settings(args, objective_of(name), finetune_objectives())
    if saved:
        return Request(given, settings, saved)
    return Request(given, settings, recipe_train_config(FINETUNE_RECIPES[name], given, settings))


def saved_settings(out: str) -> TrainConfig:
    """The settings of the run to resume, whose ranks (workers) a resume keeps unless --workers
    is given; the recipe's when it has no readable checkpoint (the resume then says why)."""
    try:
        return saved_train_config(out)
    except (OSError, GlassformerError):
        return recipe_train_config(TANG_SFT, {}, {})


def finetune_as_rank(args, comm) -> int:
    """One rank of a data-parallel fine-tune: rank 0 runs it as `finetune_here`, the others
    follow it (they receive the base model, adapters and data from rank 0: train/distributed.py)."""
    return lead_or_follow(comm, args.workers,
                          partial(finetune_here, args, request_of(args, comm), comm))


def finetune_here(args, request: Request, comm=None) -> int:
    """Fine-tune in this process: alone (comm None), or as rank 0 of a data-parallel run."""
    budget = template_budget(args)
    with stop_on_signals() as stop, progress_printer(enabled=not args.no_progress) as progress:
        should_stop = stop if comm is None else agreed_stop(comm, stop)
        hooks = dict(on_note=say, on_start=progress.start, on_step=progress.on_step,
                     should_stop=should_stop, steps=training_steps(comm),
                     template_budget=budget)
        if args.resume:
            run_state, _ = resume_finetune(out_dir=args.out, data=args.data,
                                           given={**request.given, **request.settings},
                                           allow_new_data=args.allow_new_data, **hooks)
        else:
            run_state, _ = run_finetune(model=args.model, data=args.data, out_dir=args.out,
                                        train_cfg=request.train_cfg,
                                        typed=frozenset(request.given),
                                        lora_cfg=lora_config(args), adapter=args.adapter,
                                        **hooks)
    return run_ended("finetune", args.out, run_state, stop, saved_in="run in")
