"""`glassformer finetune`: LoRA (or full) fine-tuning of a pretrained model on chat or text data.

The defaults are the Tang SFT recipe (train/recipes/, docs/finetune.md): SmolLM2-135M-Instruct
learns to write Tang quatrains from ../shared/data/tang_sft.jsonl in about half an hour on two
CPU cores.
"""
from __future__ import annotations

import dataclasses
import sys
from functools import partial

from glassformer.cli.common import (TRAIN_FLAGS, add_template_budget_arguments,
                                    given_train_flags, model_help, run_ended, template_budget)
from glassformer.cli.launch import as_rank, launch_ranks, lead_or_follow
from glassformer.errors import GlassformerError
from glassformer.io.peft import LoraConfig
from glassformer.packaged import MODEL, resolve_path
from glassformer.train.distributed import (agreed_stop, check_shards, mpi_comm,
                                           mpi_installed, training_steps, usable_cores)
from glassformer.train.loop import TrainConfig
from glassformer.train.recipes import FINETUNE_RECIPES, TANG_SFT
from glassformer.train.runs.align import check_align_shards
from glassformer.train.runs.finetune import resume_finetune, run_finetune
from glassformer.train.runs.folder import saved_train_config
from glassformer.train.runs.progress import progress_printer
from glassformer.train.runs.signals import stop_on_signals

NAME = "finetune"
HELP = ("fine-tune a pretrained causal LM on chat JSONL (loss on the replies) or text: LoRA "
        "adapters saved in PEFT's format, or --full")

RECIPE = TrainConfig(**TANG_SFT.train)
LORA_RECIPE = TANG_SFT.lora
# train's flags that finetune does not take: the objective follows from the data file (chat
# JSONL: sft; text: next-token), and only a new BERT has neighbour heads to hold
NOT_HERE = ("objective", "mask_prob", "hold_iters")
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
                        help="comma-separated PEFT module names to adapt (default: "
                             f"{','.join(LORA_RECIPE.targets)}; GPT-2: c_attn,c_proj,c_fc)")
    parser.add_argument("--adapter", default=None,
                        help="continue training this PEFT LoRA adapter folder (a finetune run's, "
                             "or peft's) instead of fresh adapters; its LoRA settings are kept")
    parser.add_argument("--full", action="store_true", default=None,
                        help="train every weight instead of LoRA adapters")
    add_align_arguments(parser)
    parser.add_argument("--resume", action="store_true", help=RESUME_HELP)
    parser.add_argument("--allow-new-data", action="store_true",
                        help="on --resume, train on a data file that differs from the run's")
    for flag, (field, kind, text) in TRAIN_FLAGS.items():
        if field in NOT_HERE:
            continue
        if field == "workers":
            parser.add_argument(flag, type=kind, default=None, help=WORKERS_HELP)
            continue
        parser.add_argument(flag, type=kind, default=None,
                            help=f"{text} (default: {getattr(RECIPE, field)})")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


# GRPO's flags -> (type, help); each sets the TrainConfig field of its name
GRPO_FLAGS = {
    "--reward": (str, "reward functions, comma-separated: tang-form (built in, the default) "
                      "or FILE.py:FUNC with TRL's signature f(prompts, completions, **columns)"),
    "--reward-weights": (str, "comma-separated weights of the rewards (default: 1 each)"),
    "--num-generations": (int, "completions sampled per prompt, the group (default: 8)"),
    "--max-completion-tokens": (int, "longest completion sampled (default: 64)"),
    "--temperature": (float, "sampling temperature (default: 1.0)"),
    "--epsilon": (float, "clip range of the ratio (default: 0.2)"),
    "--epsilon-high": (float, "upper clip range (default: --epsilon)"),
    "--loss-type": (str, "grpo, dapo (default), dr_grpo or bnpo: TRL's reductions"),
    "--scale-rewards": (str, "group (default), batch or none: what the advantage is divided "
                             "by"),
}


def align_given(args) -> dict:
    """The TrainConfig fields the alignment flags set."""
    given = {flag[2:].replace("-", "_"): getattr(args, flag[2:].replace("-", "_"))
             for flag in GRPO_FLAGS}
    given["beta"] = args.beta
    given["sft_weight"] = args.sft_weight
    return {key: value for key, value in given.items() if value is not None}


def add_align_arguments(parser) -> None:
    """--objective, --beta, --ref: preference learning (docs/align.md)."""
    parser.add_argument("--objective", choices=("sft", "dpo", "grpo"), default=None,
                        help="what to learn: sft (chat JSONL, the default for .jsonl), dpo "
                             "(TRL preference pairs: prompt, chosen, rejected) or grpo (prompts "
                             "and --reward)")
    parser.add_argument("--beta", type=float, default=None,
                        help="dpo/grpo: how strongly the policy is tied to the reference "
                             "(default: dpo 0.1, grpo 0 = no KL term, TRL's)")
    parser.add_argument("--sft-weight", type=float, default=None,
                        help="dpo: weight of the negative log-likelihood of the chosen replies "
                             "added to the DPO loss (TRL's loss_type [\"sigmoid\", \"sft\"] "
                             "with loss_weights [1, W]; RPO's alpha; default: the recipe's, "
                             "TRL's is 0)")
    for flag, (kind, text) in GRPO_FLAGS.items():
        parser.add_argument(flag, type=kind, default=None, help=f"grpo: {text}")
    parser.add_argument("--ref", choices=("base", "adapter"), default=None,
                        help="dpo's reference: base = the model with the trained adapter "
                             "switched off (default, as TRL with PEFT), adapter = the starting "
                             "adapter (--adapter) frozen")
    add_template_budget_arguments(parser)


def say(line: str) -> None:
    print(f"glassformer finetune: {line}", file=sys.stderr)


def lora_config(args) -> LoraConfig | None:
    """The LoRA settings from the flags (None with --full)."""
    if args.full:
        return None
    targets = LORA_RECIPE.targets
    if args.target is not None:
        targets = tuple(name.strip() for name in args.target.split(",") if name.strip())
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
                                                       ("--objective", args.objective),
                                                       ("--ref", args.ref)) if value]
        fixed += [f"--{key.replace('_', '-')}" for key in align_given(args)]
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
    if args.objective != "dpo" and args.ref is not None:
        raise GlassformerError("--ref is for --objective dpo")
    if args.objective != "dpo" and args.sft_weight is not None:
        raise GlassformerError("--sft-weight is for --objective dpo")
    grpo_only = [key for key in align_given(args) if key not in ("beta", "sft_weight")]
    if args.objective != "grpo" and grpo_only:
        raise GlassformerError(f"--{grpo_only[0].replace('_', '-')} is for --objective grpo")
    if args.objective not in ("dpo", "grpo") and args.beta is not None:
        raise GlassformerError("--beta is for --objective dpo or grpo")
    resolve_path(args.model, MODEL)   # a missing model or package: one line, nothing loaded


def run(args) -> int:
    check_flags(args)
    # --workers N > 1 starts N ranks through mpiexec (as train does); under mpiexec this is one
    comm = mpi_comm()
    if comm is not None:
        return as_rank(comm, partial(finetune_as_rank, args, comm))
    settings = saved_settings(args.out) if args.resume else recipe_of(args.objective)
    workers = args.workers or (settings.workers if args.resume else 1)
    if workers > 1:
        batch_size = args.batch_size or settings.batch_size
        check_align_shards(args.objective or settings.objective, batch_size, workers)
        check_shards(batch_size, workers)
        if workers > usable_cores():
            raise GlassformerError(f"--workers {workers} is more than the {usable_cores()} "
                                   "usable cores here; give at most that many")
        if mpi_installed():
            return launch_ranks(args, workers, command_name=NAME)
        say(f"note: mpi4py is not installed here, so --workers {workers} trains in one process "
            "(docs/distributed.md)")
    return finetune_here(args)


def recipe_of(objective: str | None) -> TrainConfig:
    """The settings a new run of --objective starts from (the Tang SFT recipe by default)."""
    return TrainConfig(**FINETUNE_RECIPES.get(objective or "sft", TANG_SFT).train)


def saved_settings(out: str) -> TrainConfig:
    """The settings of the run to resume, whose ranks (workers) a resume keeps unless --workers
    is given; the recipe's when it has no readable checkpoint (the resume then says why)."""
    try:
        return saved_train_config(out)
    except (OSError, GlassformerError):
        return RECIPE


def finetune_as_rank(args, comm) -> int:
    """One rank of a data-parallel fine-tune: rank 0 runs it as `finetune_here`, the others
    follow it (they receive the base model, adapters and data from rank 0: train/distributed.py)."""
    return lead_or_follow(comm, args.workers, partial(finetune_here, args, comm))


def finetune_here(args, comm=None) -> int:
    """Fine-tune in this process: alone (comm None), or as rank 0 of a data-parallel run."""
    given = given_train_flags(args, skip=NOT_HERE)
    if comm is None:
        given.pop("workers", None)
    with stop_on_signals() as stop, progress_printer(enabled=not args.no_progress) as progress:
        should_stop = stop if comm is None else agreed_stop(comm, stop)
        hooks = dict(on_note=say, on_start=progress.start, on_step=progress.on_step,
                     should_stop=should_stop, steps=training_steps(comm))
        if args.resume:
            run_state, _ = resume_finetune(out_dir=args.out, data=args.data, given=given,
                                           allow_new_data=args.allow_new_data,
                                           template_budget=template_budget(args), **hooks)
        else:
            if "max_iters" in given and "lr_decay_iters" not in given:
                given["lr_decay_iters"] = given["max_iters"]   # the decay spans the run given
            given.update(align_given(args))
            train_cfg = dataclasses.replace(recipe_of(args.objective), **given)
            run_state, _ = run_finetune(model=args.model, data=args.data, out_dir=args.out,
                                        train_cfg=train_cfg, lora_cfg=lora_config(args),
                                        adapter=args.adapter, objective=args.objective,
                                        ref=args.ref or "base",
                                        template_budget=template_budget(args), **hooks)
    return run_ended("finetune", args.out, run_state, stop, saved_in="run in")
