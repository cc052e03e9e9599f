"""`glassformer train`: train a GPT (or LLaMA-style) model from scratch on a text file."""
from __future__ import annotations

import shlex
import sys
from functools import partial

from glassformer.blas import blas_threads
from glassformer.cli.common import model_help
from glassformer.cli.launch import as_rank, launch_ranks, saved_train_config
from glassformer.errors import GlassformerError
from glassformer.models.bert import BertConfig
from glassformer.models.gpt2 import GPT2Config
from glassformer.models.neighbour_heads import check_neighbour_heads
from glassformer.models.llama import LlamaConfig
from glassformer.packaged import MODEL, TOKENIZER, packaged_names, resolve_path
from glassformer.train.distributed import (agreed_stop, check_shards, default_workers,
                                           follow_rank_zero, mpi_comm, mpi_installed,
                                           threads_per_rank, training_steps, usable_cores)
from glassformer.train.loop import TrainConfig
from glassformer.train.progress import progress_printer
from glassformer.train.pairs_run import (G2P_RECIPE, run_pairs_training, transformer_config,
                                         with_seq2seq_defaults)
from glassformer.train.run import plot_loss_curve, resume_training, run_training
from glassformer.train.signals import stop_on_signals

NAME = "train"
HELP = ("train a GPT (char-level, or with --tokenizer any tokenizer glassformer loads) with "
        "hand-written backprop (defaults: nanoGPT's Shakespeare CPU recipe)")

# flag -> (TrainConfig field, type, help)
TRAIN_FLAGS = {
    "--block-size": ("block_size", int, "context length T of each training sequence"),
    "--batch-size": ("batch_size", int, "sequences per micro-batch B"),
    "--grad-accum": ("grad_accum", int, "micro-batches summed per optimizer step"),
    "--lr": ("lr", float, "peak learning rate"),
    "--min-lr": ("min_lr", float, "learning rate at the end of the cosine decay"),
    "--warmup-iters": ("warmup_iters", int, "iterations of linear warmup"),
    "--lr-decay-iters": ("lr_decay_iters", int, "iteration where the cosine decay reaches min-lr"),
    "--max-iters": ("max_iters", int, "optimizer steps in all"),
    "--weight-decay": ("weight_decay", float, "AdamW decoupled weight decay (matrices only)"),
    "--beta1": ("beta1", float, "AdamW beta1"),
    "--beta2": ("beta2", float, "AdamW beta2"),
    "--grad-clip": ("grad_clip", float, "clip the global gradient norm to this (0: off)"),
    "--eval-interval": ("eval_interval", int, "evaluate and checkpoint every N iterations"),
    "--eval-iters": ("eval_iters", int, "batches per train/val loss estimate"),
    "--workers": ("workers", int, "batch shards trained in parallel, one per CPU core "
                                  "(default: every usable core)"),
    "--objective": ("objective", str, "what the run learns: next-token (a decoder) or mlm "
                                      "(BERT's masked-LM, with --arch bert)"),
    "--schedule": ("schedule", str, "learning-rate schedule: cosine (warmup, cosine decay to "
                                    "--min-lr) or inverse-sqrt (the Transformer paper's warmup, "
                                    "then 1/sqrt(step))"),
    "--label-smoothing": ("label_smoothing", float, "cross-entropy label smoothing"),
    "--mask-prob": ("mask_prob", float, "--objective mlm: share of the tokens chosen to "
                                        "predict, 80%% of them [MASK]ed, 10%% random, 10%% kept"),
    "--hold-iters": ("hold_iters", int, "--arch bert: iterations for which layer 0's neighbour "
                                        "heads stay pointed at the neighbours (a new BERT has "
                                        "them when its head size is at least block size - 1; "
                                        "docs/bert.md)"),
}


# The model flags: (config field, new run's default, help). On --resume the checkpoint's model
# is kept, and a flag that differs from it is refused.
MODEL_FLAGS = {
    "--arch": ("arch", "gpt2", "model family to train from scratch: gpt2, llama, bert "
                               "(an encoder, trained with --objective mlm), or transformer (the "
                               "paper's encoder-decoder, on --data cmudict, "
                               "tang-couplets:PATH or a source<TAB>target TSV file; defaults: "
                               "the G2P recipe, docs/seq2seq.md)"),
    "--n-layer": ("n_layer", 4, "transformer layers L"),
    "--n-head": ("n_head", 4, "attention heads H"),
    "--n-kv-head": ("n_kv_head", None, "key/value heads K for --arch llama (default: n-head)"),
    "--d-model": ("d_model", 128, "model width C"),
    "--dropout": ("dropout", 0.0, "dropout probability"),
}
RESUME_HELP = ("continue the run in --out from its last checkpoint, with the run's own settings; "
               "only --max-iters, --eval-interval, --lr-decay-iters, --min-lr and --workers may "
               "be changed")
# Exit codes after a stop by signal, as a shell reports a process killed by it (128 + signal).
SIGNAL_EXIT = {"SIGINT": 130, "SIGTERM": 143}


def add_arguments(parser) -> None:
    defaults = TrainConfig()
    # note: every setting defaults to None, so a run can tell the flags given from the ones left
    # out: a new run fills them from TrainConfig and MODEL_FLAGS, a resume from the checkpoint
    parser.set_defaults(seed=None)
    parser.add_argument("--data", default=None,
                        help="UTF-8 text file to train on (default: glassformer's own source, "
                             "no download; on --resume: the run's own file)")
    parser.add_argument("--out", default="out", help="run folder for checkpoints and logs")
    parser.add_argument("--init", default=None,
                        help=model_help("start from the weights and tokenizer of this causal LM "
                                        "(gpt2 or llama family)"))
    parser.add_argument("--tokenizer", default=None,
                        help="train with this tokenizer instead of a char vocabulary built from "
                             "the data: a folder or file glassformer loads (tokenizer.json, "
                             "vocab.json + merges.txt, vocab.txt, .tiktoken, .gguf; e.g. one "
                             "trained by `glassformer tokenizer train`) or a name: "
                             f"{', '.join(packaged_names(TOKENIZER))}. The model's vocab is "
                             "the tokenizer's padded up to a multiple of 64")
    parser.add_argument("--resume", action="store_true", help=RESUME_HELP)
    parser.add_argument("--allow-new-data", action="store_true",
                        help="on --resume, train on a data file that differs from the run's "
                             "recorded one (changed, or another --data)")
    for flag, (field, default, text) in MODEL_FLAGS.items():
        kind = str if field == "arch" else float if field == "dropout" else int
        choices = ["gpt2", "llama", "bert", "transformer"] if field == "arch" else None
        parser.add_argument(flag, type=kind, default=None, choices=choices,
                            help=f"{text} (default: {default})")
    parser.add_argument("--bias", action="store_true", default=None,
                        help="use biases in linears and norms (nanoGPT's default is off)")
    for flag, (field, kind, text) in TRAIN_FLAGS.items():
        shown = "" if field == "workers" else f" (default: {getattr(defaults, field)})"
        parser.add_argument(flag, type=kind, default=None, help=text + shown)
    parser.add_argument("--hostfile", default=None,
                        help="Open MPI hostfile: run the --workers ranks on these machines "
                             "(docs/distributed.md)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


# --arch bert: the masked-LM recipe on the Tang poems (docs/bert.md), where a flag is not given
MLM_TRAIN_DEFAULTS = {"objective": "mlm", "block_size": 32, "batch_size": 64, "lr": 2e-3,
                      "min_lr": 2e-4, "warmup_iters": 100, "max_iters": 9000,
                      "lr_decay_iters": 9000, "weight_decay": 0.01, "beta2": 0.999,
                      "mask_prob": 0.4, "hold_iters": 1500,
                      "eval_interval": 500, "eval_iters": 10}
MLM_MODEL_DEFAULTS = {"n_layer": 2, "n_head": 4, "d_model": 128}


def check_objective(arch: str, objective: str | None) -> None:
    """--objective mlm on a decoder, or a BERT with another objective: one line each."""
    if objective == "mlm" and arch != "bert":
        raise GlassformerError(f"--objective mlm trains an encoder: give --arch bert (got "
                               f"--arch {arch}, a decoder, which predicts the next token)")
    if arch == "bert" and objective not in (None, "mlm"):
        raise GlassformerError(f"--arch bert trains with --objective mlm, got --objective "
                               f"{objective}")


def with_mlm_defaults(train: dict, model: dict) -> tuple[dict, dict]:
    """A new run's given settings, completed by the masked-LM recipe when it trains a BERT."""
    arch = model.get("arch", "gpt2")
    check_objective(arch, train.get("objective"))
    if arch != "bert":
        return train, model
    return {**MLM_TRAIN_DEFAULTS, **train}, {**MLM_MODEL_DEFAULTS, **model}


def model_config(flags: dict, vocab_size: int):
    """The new model's config from the model flags, once the char tokenizer knows vocab_size."""
    if flags["arch"] == "bert":
        neighbour = fits_neighbour_heads(flags["d_model"], flags["n_head"], flags["block_size"])
        return BertConfig(vocab_size=vocab_size, max_seq_len=flags["block_size"],
                          n_layer=flags["n_layer"], n_head=flags["n_head"],
                          d_model=flags["d_model"], dropout=flags["dropout"], mlm_head=True,
                          sinusoid_init=not neighbour, neighbour_heads=neighbour,
                          activation="gelu_tanh")   # Google's BERT's GELU; exports as gelu_new
    if flags["arch"] == "llama":
        return LlamaConfig(vocab_size=vocab_size, max_seq_len=flags["block_size"],
                           n_layer=flags["n_layer"], n_head=flags["n_head"],
                           n_kv_head=flags["n_kv_head"] or flags["n_head"],
                           d_model=flags["d_model"], d_ff=None, dropout=flags["dropout"])
    return GPT2Config(vocab_size=vocab_size, max_seq_len=flags["block_size"],
                      n_layer=flags["n_layer"], n_head=flags["n_head"], d_model=flags["d_model"],
                      dropout=flags["dropout"], bias=flags["bias"])


def fits_neighbour_heads(d_model: int, n_head: int, block_size: int) -> bool:
    """Whether a new BERT starts with neighbour heads (models/neighbour_heads.py): they need a
    head size of at least block_size - 1 and two heads; otherwise the position table starts from
    sinusoids, as before them (the run's config.json records which: neighbour_heads)."""
    try:
        check_neighbour_heads(d_model, n_head, block_size)
    except GlassformerError:
        return False
    return True


def given_flags(args) -> tuple[dict, dict]:
    """(training settings, model settings) given explicitly on the command line."""
    train = {field: getattr(args, flag[2:].replace("-", "_"))
             for flag, (field, _, _) in TRAIN_FLAGS.items()}
    train["seed"] = args.seed
    model = {field: getattr(args, flag[2:].replace("-", "_"))
             for flag, (field, _, _) in MODEL_FLAGS.items()}
    model["bias"] = args.bias
    return ({key: value for key, value in train.items() if value is not None},
            {key: value for key, value in model.items() if value is not None})


def check_flags(args) -> None:
    """Checks only the command line can make (the library checks every setting's value)."""
    if not args.out.strip():
        raise GlassformerError("--out must name a run folder, got an empty string")
    if args.workers is not None and args.workers < 1:
        raise GlassformerError(f"--workers must be at least 1, got {args.workers} (leave it out "
                               "to use one per core)")
    if args.resume and args.init is not None:
        raise GlassformerError("--init starts a new run and --resume continues one; give one")
    if args.allow_new_data and not args.resume:
        raise GlassformerError("--allow-new-data only applies to --resume")
    if args.init is not None and args.tokenizer is not None:
        raise GlassformerError("--init brings its model's own tokenizer; give --init or "
                               "--tokenizer, not both")
    if args.arch == "transformer" and (args.init is not None or args.tokenizer is not None):
        raise GlassformerError("--arch transformer builds its pair vocabulary from --data; "
                               "--init and --tokenizer do not apply")
    if args.init is not None:
        resolve_path(args.init, MODEL)  # a missing model or package: one line before any launch
    if args.tokenizer is not None:
        resolve_path(args.tokenizer, TOKENIZER)
    if not args.resume:
        check_objective(args.arch or "gpt2", args.objective)   # before any rank is launched


def say(line: str) -> None:
    print(f"glassformer train: {line}", file=sys.stderr)


def run_ended(command: str, out: str, run_state, stop, *, saved_in: str) -> int:
    """The last lines of a training command (train, finetune) and its exit status: how to
    continue a run stopped by a signal, or the best val loss and the loss curve."""
    if stop.signal_name:
        print(f"glassformer {command}: stopped by {stop.signal_name} at iteration "
              f"{run_state.it}; checkpoint saved in {out}. Continue with: glassformer {command} "
              f"--out {shlex.quote(out)} --resume", file=sys.stderr)
        return SIGNAL_EXIT.get(stop.signal_name, 130)
    plot = plot_loss_curve(out)
    print(f"done: iter {run_state.it}, best val loss {run_state.best_val:.4f}; {saved_in} "
          f"{out}" + (f", loss curve {plot}" if plot else ""), file=sys.stderr)
    return 0


def run(args) -> int:
    check_flags(args)
    # issue 15: --workers N > 1 starts N ranks through mpiexec; under mpiexec this is one of them
    comm = mpi_comm()
    if comm is not None:
        return as_rank(comm, partial(train_as_rank, args, comm))
    saved = saved_train_config(args.out) if args.resume else {}  # a resume keeps its ranks
    recipe = {"bert": MLM_TRAIN_DEFAULTS, "transformer": G2P_RECIPE}.get(args.arch, {})
    default_batch = recipe.get("batch_size", TrainConfig().batch_size)
    batch_size = args.batch_size or saved.get("batch_size") or default_batch
    workers = args.workers or saved.get("workers") or default_workers(batch_size)
    check_shards(batch_size, workers)
    workers = capped_to_cores(workers, batch_size, args.hostfile)
    if workers > 1 and mpi_installed():
        return launch_ranks(args, workers, args.hostfile)
    if workers > 1:
        say(f"note: mpi4py is not installed here, so --workers {workers} trains in one process "
            "(docs/distributed.md)")
    return train_here(args)


def capped_to_cores(workers: int, batch_size: int, hostfile: str | None) -> int:
    """Issue 21: more ranks than this machine's cores only make them wait on each other, so
    without a --hostfile (other machines) the count is capped, with a notice."""
    cores = usable_cores()
    if hostfile is not None or workers <= cores:
        return workers
    capped = cores
    while batch_size % capped:
        capped -= 1  # the most ranks, up to the cores, that split the batch evenly
    say(f"note: --workers {workers} is more than the {cores} core{'s' * (cores != 1)} here: "
        f"training with {capped}")
    return capped


def train_as_rank(args, comm) -> int:
    """One rank of a data-parallel run: rank 0 trains as `train_here`, the others follow it."""
    if args.workers is not None and args.workers != comm.Get_size():
        raise GlassformerError(f"--workers {args.workers}, but mpiexec started "
                               f"{comm.Get_size()} ranks")
    with blas_threads(threads_per_rank(comm)):
        if comm.Get_rank() == 0:
            return train_here(args, comm)
        with stop_on_signals() as stop:
            follow_rank_zero(comm, agreed_stop(comm, stop))
        return 0


def train_here(args, comm=None) -> int:
    """Train in this process: alone (comm None), or as rank 0 of a data-parallel run."""
    steps = training_steps(comm)
    train_given, model_given = given_flags(args)
    with stop_on_signals() as stop, progress_printer(enabled=not args.no_progress) as progress:
        should_stop = stop if comm is None else agreed_stop(comm, stop)
        if args.resume:
            run_state, model_cfg = resume_training(
                out_dir=args.out, data=args.data, given=train_given, given_model=model_given,
                allow_new_data=args.allow_new_data, tokenizer=args.tokenizer, on_note=say,
                on_start=progress.start, on_step=progress.on_step, should_stop=should_stop,
                steps=steps)
        else:
            train_given, model_given = with_mlm_defaults(train_given, model_given)
            train_given, model_given = with_seq2seq_defaults(train_given, model_given)
            train_cfg = TrainConfig(**train_given)
            flags = {field: default for field, default, _ in MODEL_FLAGS.values()}
            flags.update(bias=False, **model_given, block_size=train_cfg.block_size)
            init = None if args.init is None else str(resolve_path(args.init, MODEL))
            if flags["arch"] == "transformer":    # pairs, its own vocabulary: train/pairs_run.py
                run_state, model_cfg = run_pairs_training(
                    data=args.data, out_dir=args.out,
                    model_cfg_for=partial(transformer_config, flags), train_cfg=train_cfg,
                    on_start=progress.start, on_step=progress.on_step,
                    should_stop=should_stop, steps=steps)
            else:
                run_state, model_cfg = run_training(
                    data=args.data, out_dir=args.out, model_cfg_for=partial(model_config, flags),
                    train_cfg=train_cfg, init=init, tokenizer=args.tokenizer,
                    on_start=progress.start, on_step=progress.on_step, should_stop=should_stop,
                    steps=steps)
    return run_ended("train", args.out, run_state, stop, saved_in="checkpoint in")
