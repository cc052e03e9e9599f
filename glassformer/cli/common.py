"""What several commands share: the --seed and --model flags, the sampling flags, streaming output.

    add_seed_argument       --seed, which every command (and every sub-action) takes
    model_help              the help text of a flag that names a model (path or packaged name)
    add_sampling_arguments  --max-new-tokens --temperature --top-k --top-p --no-cache, and
                            --min-p, the penalties and --logit-bias ID=BIAS
    sampling_kwargs         those flags (and --seed) as keyword arguments of generate(), the
                            sampling ones as one Sampling (generate/sampling.py)
    print_stream            print streamed text as it arrives; report_speed: tokens/s on stderr
    blas_sized_to_free_cores  every command runs with BLAS threads = the cores free at its start
    loading_line            'loading NAME ... ready in N s' at a terminal; load_model_shown uses it
    add_adapter_argument    --adapter DIR: a LoRA adapter (PEFT's format) merged into --model
    add_model_argument      --model, required, for a command that runs one model
    check_at_least_one      a one-line error for a size flag below 1 (--top-k 0, --beam 0)
    add_template_budget_arguments  --template-max-chars --template-timeout (chat templates)
    template_budget         those flags as a RenderBudget, each refused unless more than 0
    detect_lang             zh or en from the locale, for the commands with --lang
    TRAIN_FLAGS             the training loop's flags `train` and `finetune` share (TrainConfig
                            fields; an objective's own come from cli/settings_flags.py)
    given_train_flags       those given on the command line, as TrainConfig fields
    run_ended               the last lines of a training command and its exit status

Models are read by glassformer.io.named_models.load_model, which takes a path or a name from
glassformer/packaged.py, so every command that takes a model takes the same things.
"""
from __future__ import annotations

import shlex
import sys
import time
from contextlib import AbstractContextManager, contextmanager

import numpy as np

from glassformer.blas import blas_threads, free_cores
from glassformer.display import detect_lang  # noqa: F401  (shared with the notebook views)
from glassformer.errors import GlassformerError
from glassformer.generate.sampling import Sampling
from glassformer.io.named_models import load_model
from glassformer.packaged import MODEL, PACKAGED, packaged_names

SEED_HELP = "seed for every random choice this command makes"


def add_seed_argument(parser, *, default=0) -> None:
    """--seed on one parser. A sub-action's parser passes default=argparse.SUPPRESS, so that
    `CMD --seed 3 ACTION` and `CMD ACTION --seed 3` both work and neither resets the other.

    subtle: one --seed action per parser; a shared `parents=` action would let one command's
    set_defaults(seed=...) change every other command's default.
    """
    parser.add_argument("--seed", type=int, default=default, help=SEED_HELP)


def model_help(what: str) -> str:
    """Help text for a flag naming a model: every path load_model reads, and the packaged names."""
    names = ", ".join(f"{name} ({PACKAGED[name].about})" for name in packaged_names(MODEL))
    return (f"{what}: a .gguf file, a Hugging Face folder (config.json + model.safetensors), a "
            f"glassformer training run or checkpoint folder, or a name: {names}")


def add_sampling_arguments(parser, *, max_new_tokens: int, temperature: float,
                           top_p: float | None) -> None:
    """The sampling flags `generate` and `chat` share."""
    parser.add_argument("--max-new-tokens", type=int, default=max_new_tokens,
                        help=f"most tokens to generate (default: {max_new_tokens})")
    parser.add_argument("--temperature", type=float, default=temperature,
                        help=f"softmax temperature; 0 picks the most likely token (greedy) "
                             f"(default: {temperature})")
    parser.add_argument("--top-k", type=int, default=None,
                        help="sample only among the k most likely tokens (default: off)")
    parser.add_argument("--top-p", type=float, default=top_p,
                        help=f"sample only from the smallest set of tokens whose probability "
                             f"reaches p (nucleus) (default: {top_p or 'off'})")
    parser.add_argument("--no-cache", action="store_true",
                        help="recompute the whole sequence at every step instead of using the "
                             "KV cache (slower; for comparing)")
    add_adjustment_arguments(parser)


def add_adjustment_arguments(parser) -> None:
    """min-p, the penalties and logit_bias (generate/penalties.py), as serve's fields."""
    parser.add_argument("--min-p", type=float, default=None,
                        help="keep only tokens at least this fraction as likely as the most "
                             "likely one (default: off)")
    parser.add_argument("--repetition-penalty", type=float, default=1.0,
                        help="divide the positive logits (multiply the negative) of every id "
                             "already in the prompt or reply by this; > 1 repeats less "
                             "(default: 1, off)")
    parser.add_argument("--presence-penalty", type=float, default=0.0,
                        help="subtract this from the logit of every id already in the reply, "
                             "in [-2, 2] (default: 0)")
    parser.add_argument("--frequency-penalty", type=float, default=0.0,
                        help="subtract this times the count of each id in the reply so far, "
                             "in [-2, 2] (default: 0)")
    parser.add_argument("--logit-bias", action="append", default=[], metavar="ID=BIAS",
                        help="add BIAS in [-100, 100] to token ID's logit (-100 bans it); "
                             "repeat the flag for more ids")


def logit_bias_pairs(items: list[str]) -> tuple:
    """--logit-bias ID=BIAS flags as ((id, bias), ...); a malformed one is one line."""
    pairs = []
    for item in items:
        token, _, value = item.partition("=")
        try:
            pairs.append((int(token), float(value)))
        except ValueError:
            raise GlassformerError(f"--logit-bias takes ID=BIAS such as 50256=-100, got "
                                   f"{item!r}") from None
    return tuple(pairs)


def sampling_kwargs(args) -> dict:
    """The generate() keyword arguments from the shared flags (a bad value: one line)."""
    sampling = Sampling(temperature=args.temperature, top_k=args.top_k, top_p=args.top_p,
                        min_p=args.min_p, repetition_penalty=args.repetition_penalty,
                        presence_penalty=args.presence_penalty,
                        frequency_penalty=args.frequency_penalty,
                        logit_bias=logit_bias_pairs(args.logit_bias))
    return dict(max_new_tokens=args.max_new_tokens, sampling=sampling, seed=args.seed,
                use_cache=not args.no_cache)


def print_stream(steps) -> tuple[int, float]:
    """Print each step's new text as it arrives; returns (tokens, seconds)."""
    start = time.perf_counter()
    n_tokens = 0
    for step in steps:
        n_tokens += step.token_id is not None
        if step.text:
            sys.stdout.write(step.text)
            sys.stdout.flush()
    return n_tokens, time.perf_counter() - start


def report_speed(n_tokens: int, seconds: float) -> None:
    """One line on stderr, so stdout holds only the text."""
    rate = n_tokens / seconds if seconds > 0 else float("inf")
    print(f"[{n_tokens} tokens in {seconds:.2f} s, {rate:.1f} tokens/s]", file=sys.stderr)


def blas_sized_to_free_cores() -> AbstractContextManager:
    """BLAS threads for one command: the cores free when it starts (glassformer/blas.py's rule).

    With the other core busy (a training run in another terminal), sampling keeps one thread
    instead of two threads that wait on each other; on an idle machine every core is used.
    """
    return blas_threads(free_cores())


@contextmanager
def loading_line(name: str):
    """'loading NAME ... ready in N s' on stderr at a terminal (a large model takes seconds to
    read); nothing when stderr is piped. On an error the line is ended first, so the error's own
    line stands alone."""
    talking = sys.stderr.isatty()
    if talking:
        print(f"loading {name} ...", end="", file=sys.stderr, flush=True)
    start = time.perf_counter()
    try:
        yield
    except BaseException:
        if talking:
            print(file=sys.stderr, flush=True)
        raise
    if talking:
        print(f" ready in {time.perf_counter() - start:.1f} s", file=sys.stderr, flush=True)


def add_adapter_argument(parser) -> None:
    """--adapter DIR, for a command that loads --model."""
    parser.add_argument("--adapter", default=None,
                        help="a LoRA adapter folder (adapter_config.json + "
                             "adapter_model.safetensors, as peft or glassformer finetune write "
                             "it), merged into the model's weights on load")


def load_model_shown(name_or_path, adapter=None, dequantize: bool = False,
                     activations: str = "float32"):
    """load_model (a path or a packaged name, and an adapter if given) inside a loading line;
    dequantize: a GGUF's quantized matrices widened to float32 (--dequantize); activations:
    "q8" rounds their inputs to 8-bit blocks as llama.cpp does (--activation-quant)."""
    with loading_line(str(name_or_path) if adapter is None else f"{name_or_path} + {adapter}"):
        return load_model(name_or_path, adapter=adapter, dequantize=dequantize,
                          activations=activations)


def add_dequantize_argument(parser) -> None:
    """--dequantize, for a command that loads --model (a GGUF file's weights stay quantized)."""
    parser.add_argument("--dequantize", action="store_true",
                        help="widen a GGUF file's quantized weights (Q8_0, Q4_0, Q4_1, Q4_K) to "
                             "float32 on load; by default they stay in their blocks, about the "
                             "file's size in memory")


def add_activation_quant_argument(parser) -> None:
    """--activation-quant float32|q8, for a command that loads --model (a GGUF kept quantized)."""
    parser.add_argument("--activation-quant", choices=("float32", "q8"), default="float32",
                        dest="activation_quant",
                        help="q8: round the inputs of a GGUF's quantized weights to 8-bit blocks "
                             "and multiply in integers, as llama.cpp's CPU backend does (its "
                             "logits, closely); float32 (default): the exact product of the "
                             "file's blocks with float32 inputs")


def add_model_argument(parser, what: str) -> None:
    """--model, required, for a command that runs one model: `what` says which (model_help)."""
    parser.add_argument("--model", required=True, help=model_help(what))


def add_template_budget_arguments(parser) -> None:
    """The limits of a chat template's render (tokenizers/template_budget.py), for the commands
    that render one: chat, finetune, eval, serve."""
    parser.add_argument("--template-max-chars", type=int, default=None, metavar="N",
                        help="the most characters a chat template may render for one "
                             "conversation (default: 4000000); past it one line names a "
                             "value that fits")
    parser.add_argument("--template-timeout", type=float, default=None, metavar="S",
                        help="the most seconds a chat template may take to render one "
                             "conversation (default: 10)")


def template_budget(args):
    """--template-max-chars and --template-timeout as a RenderBudget (None: the defaults)."""
    from glassformer.tokenizers.template_budget import RenderBudget
    if args.template_max_chars is not None and args.template_max_chars < 1:
        raise GlassformerError(f"--template-max-chars must be at least 1, got "
                               f"{args.template_max_chars}")
    if args.template_timeout is not None and not args.template_timeout > 0.0:   # (NaN too)
        raise GlassformerError(f"--template-timeout must be more than 0 seconds, got "
                               f"{args.template_timeout}")
    return RenderBudget(args.template_max_chars, args.template_timeout)


def check_at_least_one(**flags) -> None:
    """Refuse the first flag below 1, in one line: check_at_least_one(top_k=0) says
    "--top-k must be at least 1, got 0". A flag left out (None) passes."""
    for name, value in flags.items():
        if value is not None and value < 1:
            raise GlassformerError(f"--{name.replace('_', '-')} must be at least 1, got {value}")


# flag -> (TrainConfig field, type, help): the training flags of `train` and `finetune`
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
    "--schedule": ("schedule", str, "learning-rate schedule: cosine (warmup, cosine decay to "
                                    "--min-lr) or inverse-sqrt (the Transformer paper's warmup, "
                                    "then 1/sqrt(step))"),
    "--label-smoothing": ("label_smoothing", float, "cross-entropy label smoothing"),
    "--hold-iters": ("hold_iters", int, "--arch bert: iterations for which layer 0's neighbour "
                                        "heads stay pointed at the neighbours (a new BERT has "
                                        "them when its heads can point at one position of the "
                                        "block; docs/bert.md)"),
}
# Exit codes after a stop by signal, as a shell reports a process killed by it (128 + signal).
SIGNAL_EXIT = {"SIGINT": 130, "SIGTERM": 143, "SIGHUP": 129}


def given_train_flags(args, skip: tuple[str, ...] = ()) -> dict:
    """The training settings given on the command line (TrainConfig field -> value), and
    --seed; `skip`: fields the command does not take."""
    given = {field: getattr(args, flag[2:].replace("-", "_"))
             for flag, (field, _, _) in TRAIN_FLAGS.items() if field not in skip}
    given["seed"] = args.seed
    return {key: value for key, value in given.items() if value is not None}


def run_ended(command: str, out: str, run_state, stop, *, saved_in: str) -> int:
    """The last lines of a training command (train, finetune) and its exit status: how to
    continue a run stopped by a signal, or the best val loss and the loss curve."""
    if stop.signal_name:
        print(f"glassformer {command}: stopped by {stop.signal_name} at iteration "
              f"{run_state.it}; checkpoint saved in {out}. Continue with: glassformer {command} "
              f"--out {shlex.quote(out)} --resume", file=sys.stderr)
        return SIGNAL_EXIT.get(stop.signal_name, 130)
    # note: imported here, so the commands that do not train never load the training code
    from glassformer.train.runs.text import plot_loss_curve
    plot = plot_loss_curve(out)
    print(f"done: iter {run_state.it}, best val loss {run_state.best_val:.4f}; {saved_in} "
          f"{out}" + (f", loss curve {plot}" if plot else ""), file=sys.stderr)
    return 0


# ---------------------------------------------------------------- patch, attribute, heads

def add_cache_argument(parser) -> None:
    parser.add_argument("--max-cache-mb", type=float, default=None,
                        help="refuse, before running, when the cached activations would take "
                             "more than this many MiB (default: half this machine's memory)")


def tokens_of(model, text: str) -> np.ndarray:
    """text -> (T,) int64 ids by the model's tokenizer; one line when it has none or T is 0."""
    if model.tokenizer is None:
        raise GlassformerError("this model came without a tokenizer; give a model folder or "
                               "file that has one")
    ids = np.asarray(model.tokenizer.encode(text), dtype=np.int64)
    if ids.size == 0:
        raise GlassformerError(f"the prompt {text!r} encodes to no tokens")
    return ids


def one_token(model, text: str, flag: str) -> int:
    """The single token id `text` encodes to; more than one token is one line naming them."""
    ids = tokens_of(model, text)
    if ids.size != 1:
        pieces = [model.tokenizer.decode([int(i)]) for i in ids]
        raise GlassformerError(f"{flag} {text!r} is {ids.size} tokens {pieces}; give one token "
                               "(often with its leading space, ' Paris')")
    return int(ids[0])
