"""`glassformer train`: train a GPT (or LLaMA-style) model from scratch on a text file."""
from __future__ import annotations

import sys
from functools import partial

from glassformer.cli.common import TRAIN_FLAGS, given_train_flags, model_help, run_ended
from glassformer.cli.settings_flags import add_settings_arguments, given_settings
from glassformer.cli.launch import as_rank, launch_ranks, lead_or_follow
from glassformer.errors import GlassformerError
from glassformer.models.registry import FAMILIES
from glassformer.packaged import (MODEL, TOKENIZER, data_help, data_path, packaged_names,
                                  resolve_path)
from glassformer.train.distributed import (agreed_stop, check_shards, default_workers,
                                           mpi_comm, mpi_installed, training_steps,
                                           usable_cores)
from glassformer.train.loop import TrainConfig
from glassformer.train.objectives import OBJECTIVES, objective_of
from glassformer.train.objectives.objective import PAIRS
from glassformer.train.recipes import (MOE, RECIPE_OF_OBJECTIVE, SHAKESPEARE, new_run_settings,
                                       recipe_for)
from glassformer.train.runs.folder import saved_train_config
from glassformer.train.runs.forms import form_of
from glassformer.train.runs.progress import progress_printer
from glassformer.train.runs.signals import stop_on_signals
from glassformer.train.runs.start import resume_training, start_training

NAME = "train"
HELP = ("train a GPT (char-level, or with --tokenizer any tokenizer glassformer loads) with "
        "hand-written backprop (defaults: nanoGPT's Shakespeare CPU recipe)")

# The model flags: (config field, help); a new run's defaults are its recipe's (SHAKESPEARE's
# shown). On --resume the checkpoint's model is kept, and a flag that differs from it is refused.
MODEL_FLAGS = {
    "--arch": ("arch", "model family to train from scratch: gpt2, llama, bert (an encoder, "
                       "trained with --objective mlm), or transformer (the paper's "
                       "encoder-decoder, on --data cmudict, tang-couplets:PATH or a "
                       "source<TAB>target TSV file; defaults: the G2P recipe, docs/seq2seq.md)"
                       "; moe: LLaMA with sparse mixture-of-experts MLPs and QK-norm, 8 "
                       "experts, 2 per token (docs/moe.md)"),
    "--n-layer": ("n_layer", "transformer layers L"),
    "--n-head": ("n_head", "attention heads H"),
    "--n-kv-head": ("n_kv_head", "key/value heads K for --arch llama (default: n-head)"),
    "--d-model": ("d_model", "model width C"),
    "--dropout": ("dropout", "dropout probability"),
    "--n-experts": ("n_experts", "--arch moe: experts E per MoE layer"),
    "--experts-per-token": ("experts_per_token", "--arch moe: experts k each token is sent to"),
    "--shared-experts": ("shared_experts", "--arch moe: always-on shared experts, each as wide "
                                           "as a routed one"),
    "--attention": ("attention", "--arch moe: mha (grouped-query attention with QK-norm; "
                                 "exports as Qwen3MoeForCausalLM) or mla (DeepSeek's multi-head "
                                 "latent attention and sigmoid router; exports as "
                                 "DeepseekV3ForCausalLM); --arch llama or moe: window (a "
                                 "sliding window of --window keys in every layer; a llama "
                                 "exports as MistralForCausalLM); --arch llama: gated-delta "
                                 "(Qwen3.5's hybrid: Gated DeltaNet layers, a full-attention "
                                 "layer every --full-every; exports as Qwen3_5ForCausalLM)"),
    "--window": ("window", "--attention window: the keys W each query sees"),
    "--full-every": ("full_every", "--attention gated-delta: one full-attention layer in K, "
                                   "the others Gated DeltaNet (4 when not given, as Qwen3.5)"),
    "--kv-lora-rank": ("kv_lora_rank", "--attention mla: the latent width R cached per token "
                                       "and layer"),
}
RESUME_HELP = ("continue the run in --out from its last checkpoint, with the run's own settings; "
               "only --max-iters, --eval-interval, --lr-decay-iters, --min-lr and --workers may "
               "be changed")


def train_objectives() -> list:
    """The registered objectives `train` offers: those whose data form a new run of `train` can
    start (train/runs/forms.py: a text's token stream, source/target pairs)."""
    return [record for record in OBJECTIVES.values() if form_of(record.reads).start is not None]


def add_arguments(parser) -> None:
    defaults = TrainConfig()
    # note: every setting defaults to None, so a run can tell the flags given from the ones left
    # out: a new run fills them from its recipe (train/recipes/), a resume from the checkpoint
    parser.set_defaults(seed=None)
    parser.add_argument("--data", default=None, type=data_path,
                        help=data_help("UTF-8 text file to train on (default: glassformer's own "
                                       "source, no download; on --resume: the run's own file)"))
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
    for flag, (field, text) in MODEL_FLAGS.items():
        default = SHAKESPEARE.model.get(field, MOE.model.get(field))
        kind = type(default) if default is not None else int
        choices = list(FAMILIES) if flag == "--arch" else None
        parser.add_argument(flag, type=kind, default=None, choices=choices,
                            help=f"{text} (default: {default})")
    parser.add_argument("--bias", action="store_true", default=None,
                        help="use biases in linears and norms (nanoGPT's default is off)")
    parser.add_argument("--objective", default=None,
                        help="what the run learns: " + ", ".join(
                            record.name for record in train_objectives())
                        + " (default: the --arch's recipe's: next-token for a decoder, mlm "
                          "for bert, seq2seq for transformer, moe-next-token for moe)")
    for flag, (field, kind, text) in TRAIN_FLAGS.items():
        shown = "" if field == "workers" else f" (default: {getattr(defaults, field)})"
        parser.add_argument(flag, type=kind, default=None, help=text + shown)
    add_settings_arguments(parser, train_objectives(), RECIPE_OF_OBJECTIVE)
    parser.add_argument("--hostfile", default=None,
                        help="Open MPI hostfile: run the --workers ranks on these machines "
                             "(docs/distributed.md)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def given_flags(args) -> tuple[dict, dict]:
    """(training settings, model settings) given explicitly on the command line."""
    model = {field: getattr(args, flag[2:].replace("-", "_"))
             for flag, (field, _) in MODEL_FLAGS.items()}
    model["bias"] = args.bias
    return (given_train_flags(args),
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
    recipe = recipe_for(args.arch, None if args.resume else args.objective)
    reads_pairs = objective_of(recipe.objective).reads == PAIRS
    if reads_pairs and (args.init is not None or args.tokenizer is not None):
        raise GlassformerError(f"--arch {args.arch} builds its pair vocabulary from --data; "
                               "--init and --tokenizer do not apply")
    if args.init is not None:
        resolve_path(args.init, MODEL)  # a missing model or package: one line before any launch
    if args.tokenizer is not None:
        resolve_path(args.tokenizer, TOKENIZER)


def say(line: str) -> None:
    print(f"glassformer train: {line}", file=sys.stderr)


def run(args) -> int:
    check_flags(args)
    # issue 15: --workers N > 1 starts N ranks through mpiexec; under mpiexec this is one of them
    comm = mpi_comm()
    if comm is not None:
        return as_rank(comm, partial(train_as_rank, args, comm))
    saved = resumed_settings(args.out) if args.resume else None   # a resume keeps its ranks
    recipe = recipe_for(args.arch)
    default_batch = recipe.train.get("batch_size", TrainConfig().batch_size)
    batch_size = args.batch_size or (saved.batch_size if saved else default_batch)
    workers = args.workers or (saved.workers if saved else 0) or default_workers(batch_size)
    check_shards(batch_size, workers)
    workers = capped_to_cores(workers, batch_size, args.hostfile)
    if workers > 1 and mpi_installed():
        return launch_ranks(args, workers, args.hostfile)
    if workers > 1:
        say(f"note: mpi4py is not installed here, so --workers {workers} trains in one process "
            "(docs/distributed.md)")
    return train_here(args)


def resumed_settings(out: str) -> TrainConfig | None:
    """The settings of the run to resume (None when it has no readable checkpoint: the resume
    itself then says what is wrong); a resume keeps its ranks and its objective."""
    try:
        return saved_train_config(out)
    except (OSError, GlassformerError):
        return None


def typed_settings(args) -> dict:
    """The objective's settings typed on the command line, for the objective the run trains
    (a new run's, or the resumed run's own); a flag of another objective is refused."""
    if args.resume:
        saved = resumed_settings(args.out)
        name = TrainConfig.objective if saved is None else saved.objective
    else:
        name = args.objective or recipe_for(args.arch).objective
    return given_settings(args, objective_of(name), train_objectives())


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
    return lead_or_follow(comm, args.workers, partial(train_here, args, comm))


def noted_start(note: str | None, on_start, max_iters: int, start_iter: int) -> None:
    """on_start, after the recipe's note (once every setting has been checked)."""
    if note:
        say(note)
    on_start(max_iters, start_iter)


def train_here(args, comm=None) -> int:
    """Train in this process: alone (comm None), or as rank 0 of a data-parallel run."""
    steps = training_steps(comm)
    train_given, model_given = given_flags(args)
    settings_given = typed_settings(args)
    with stop_on_signals() as stop, progress_printer(enabled=not args.no_progress) as progress:
        should_stop = stop if comm is None else agreed_stop(comm, stop)
        if args.resume:
            run_state, _ = resume_training(
                out_dir=args.out, data=args.data, given={**train_given, **settings_given},
                given_model=model_given,
                allow_new_data=args.allow_new_data, tokenizer=args.tokenizer, on_note=say,
                on_start=progress.start, on_step=progress.on_step, should_stop=should_stop,
                steps=steps)
        else:
            recipe = recipe_for(args.arch, args.objective)
            model, start = new_run_settings(recipe, train_given, model_given, settings_given,
                                            objective=args.objective)
            init = None if args.init is None else str(resolve_path(args.init, MODEL))
            run_state, _ = start_training(
                data=args.data, out_dir=args.out, model=model, train_cfg=start.train_cfg,
                typed=frozenset(train_given), init=init, tokenizer=args.tokenizer,
                after_init=start.after_init, on_note=say,
                on_start=partial(noted_start, start.note, progress.start),
                on_step=progress.on_step, should_stop=should_stop, steps=steps)
    return run_ended("train", args.out, run_state, stop, saved_in="checkpoint in")
