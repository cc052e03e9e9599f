"""`glassformer eval --model MODEL --data FILE`: loss, perplexity and bits per byte of a model on
a text file (by default its val split, the part a training run holds out); with --task or --core,
benchmark accuracy and the CORE score (cli/eval_tasks.py)."""
from __future__ import annotations

import json
import sys
from functools import partial

from tqdm import tqdm

from glassformer.cli.common import (add_dequantize_argument, add_model_argument,
                                    add_template_budget_arguments, load_model_shown,
                                    template_budget)
from glassformer.cli.common import add_activation_quant_argument
from glassformer.cli.eval_tasks import add_task_arguments, is_task_run, run_tasks
from glassformer.errors import GlassformerError
from glassformer.io.jsonl import json_lines
from glassformer.packaged import data_help, data_path
from glassformer.tasks.perplexity import SPLITS, perplexity
from glassformer.tasks.preferences import PAIRS_PER_FORWARD, check_sizes, preference_accuracy
from glassformer.train.data import VAL_FRACTION, read_text

NAME = "eval"
WINDOWS_PER_FORWARD = 8   # a text file's default --batch-size
PAIRS_PER_LINE = 50       # preference pairs off a terminal: one progress line per this many
HELP = "report loss, perplexity and bits per byte of a model on a text file (val split by default)"
SPLIT_WORDS = {"all": "the whole file",
               "train": f"its train split (the first {1 - VAL_FRACTION:.0%} of the tokens)",
               "val": f"its val split (the last {VAL_FRACTION:.0%} of the tokens, as training "
                      "holds out)"}


def add_arguments(parser) -> None:
    add_model_argument(parser, "model to score")
    parser.add_argument("--data", default=None, type=data_path,
                        help=data_help("UTF-8 text file to score, or a .jsonl of preference "
                                       "pairs (prompt, chosen, rejected)"))
    parser.add_argument("--split", choices=SPLITS, default="val",
                        help="score the part training holds out (val, the default: the last "
                             f"{VAL_FRACTION:.0%}% of the tokens), the part it trains on "
                             "(train), or the whole file (all)")
    parser.add_argument("--block-size", type=int, default=None,
                        help="tokens per window (default: the model's context)")
    parser.add_argument("--batch-size", type=int, default=None,
                        help="windows per forward pass (default: 8); preference pairs: pairs "
                             f"per forward pass (default: {PAIRS_PER_FORWARD})")
    parser.add_argument("--limit", type=int, default=None, metavar="N",
                        help="preference pairs: score the file's first N pairs only")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object {loss, perplexity, tokens, split, bytes, "
                             "bits_per_byte} instead of a line")
    parser.add_argument("--adapter", default=None,
                        help="a LoRA adapter folder: on a text file, scored merged into the "
                             "model; on preference pairs (.jsonl with prompt/chosen/rejected), "
                             "the DPO policy scored against the model without it")
    add_dequantize_argument(parser)
    add_activation_quant_argument(parser)
    parser.add_argument("--ref-adapter", default=None,
                        help="preference pairs: the reference is the model with this adapter "
                             "(a DPO run's --ref adapter start) instead of the model alone")
    parser.add_argument("--beta", type=float, default=0.1,
                        help="preference pairs: the DPO beta of the rewards (default: 0.1)")
    parser.add_argument("--no-progress", action="store_true",
                        help="no progress bar (when stderr is not a terminal, preference pairs "
                             f"print a line every {PAIRS_PER_LINE} pairs instead)")
    add_template_budget_arguments(parser)   # preference pairs are rendered with the template
    add_task_arguments(parser)


def is_preference_file(path: str) -> bool:
    """A .jsonl whose first record has "chosen" and "rejected" (TRL's preference format)."""
    if not path.endswith(".jsonl"):
        return False
    try:
        _, first = next(json_lines(path), (0, {}))   # only the first record is parsed
    except GlassformerError:
        return False
    return isinstance(first, dict) and "chosen" in first and "rejected" in first


def pair_progress(bar, show_lines: bool, batch_size: int, done: int, total: int) -> None:
    """After each batch of pairs: the bar on a terminal; off one, a line to stderr each time
    the batch passes a multiple of PAIRS_PER_LINE, and at the end (a log or a CI job then sees
    the run move)."""
    bar.total = total
    bar.update(done - bar.n)   # a disabled bar ignores it
    before = max(done - batch_size, 0)
    if show_lines and (done // PAIRS_PER_LINE > before // PAIRS_PER_LINE or done == total):
        print(f"eval: {done}/{total} pairs", file=sys.stderr, flush=True)


def run_preferences(args) -> int:
    """Reward accuracy and margin of --adapter against the model alone (tasks/preferences.py)."""
    if args.adapter is None:
        raise GlassformerError("preference pairs are scored for an adapter against its base: "
                               "give --adapter DIR")
    batch_size = PAIRS_PER_FORWARD if args.batch_size is None else args.batch_size
    check_sizes(batch_size, args.limit)
    budget = template_budget(args)
    model = load_model_shown(args.model)
    terminal = sys.stderr.isatty()
    with tqdm(disable=args.no_progress or not terminal, file=sys.stderr, unit="pair",
              desc="eval") as bar:
        lines = not args.no_progress and not terminal
        result = preference_accuracy(
            model, args.adapter, args.data, beta=args.beta, batch_size=batch_size,
            ref_adapter=args.ref_adapter, limit=args.limit, template_budget=budget,
            on_pairs=partial(pair_progress, bar, lines, batch_size))
    if args.json:
        print(json.dumps(result._asdict()))
    else:
        reference = (f"{args.model} + {args.ref_adapter}" if args.ref_adapter
                     else f"{args.model} without the adapter")
        print(f"reward accuracy {result.accuracy:.2%}, mean margin {result.margin:.4f} over "
              f"{result.pairs} pairs of {args.data} (beta {result.beta:g}, reference: "
              f"{reference})")
    return 0


def run(args) -> int:
    if is_task_run(args):
        return run_tasks(args)
    if args.data is None:
        raise GlassformerError("give --data FILE (a text or preference pairs), or --task T / "
                               "--core with --data-dir DIR (benchmark tasks)")
    if is_preference_file(args.data):
        return run_preferences(args)
    if args.limit is not None:
        raise GlassformerError("--limit counts preference pairs; a text file is scored by "
                               "--split (val, train or all)")
    model = load_model_shown(args.model, args.adapter, args.dequantize, args.activation_quant)
    show = not args.no_progress and sys.stderr.isatty()
    with tqdm(disable=not show, file=sys.stderr, unit="window", desc="eval") as bar:

        def on_batch(done: int, total: int) -> None:
            bar.total = total
            bar.update(done - bar.n)

        result = perplexity(model, read_text(args.data), block_size=args.block_size,
                            batch_size=(WINDOWS_PER_FORWARD if args.batch_size is None
                                        else args.batch_size),
                            split=args.split, on_batch=on_batch)
    if args.json:
        print(json.dumps(result._asdict()))
    else:
        print(f"loss {result.loss:.4f} nats/token, perplexity {result.perplexity:.3f}, "
              f"{result.bits_per_byte:.4f} bits/byte over {result.tokens} tokens "
              f"({result.bytes:,} bytes) of {args.data}: {SPLIT_WORDS[result.split]}")
    return 0
