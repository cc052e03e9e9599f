"""`glassformer translate --model RUN [--beam K] TEXT...`: an encoder-decoder's output for each
source, one line each (a G2P run: `glassformer translate --model runs/g2p --beam 4 hello world`).

The model is an `--arch transformer` training run (its pair tokenizer encodes the text) or any
encoder-decoder load_model reads; decoding is glassformer.translate (tasks/translate.py)."""
from __future__ import annotations

import sys

from glassformer.cli.common import add_model_argument, check_at_least_one, load_model_shown
from glassformer.generate.beam import DEFAULT_ALPHA
from glassformer.tasks.translate import translate

NAME = "translate"
HELP = ("an encoder-decoder's output for each source text, greedy or by beam search (e.g. a "
        "`train --arch transformer --data cmudict` run: word -> phones)")


def add_arguments(parser) -> None:
    add_model_argument(parser, "encoder-decoder to translate with")
    parser.add_argument("texts", nargs="+", metavar="TEXT", help="source texts, one output each")
    parser.add_argument("--beam", type=int, default=1,
                        help="beam width K; 1 is greedy search (default: 1)")
    parser.add_argument("--alpha", type=float, default=DEFAULT_ALPHA,
                        help="GNMT length penalty exponent for --beam > 1: scores are divided "
                             f"by ((5 + length) / 6)^alpha (default: {DEFAULT_ALPHA})")
    parser.add_argument("--max-new-tokens", type=int, default=None,
                        help="most output tokens (default: the model's context)")
    parser.add_argument("--min-new-tokens", type=int, default=0,
                        help="no end-of-sequence before this many tokens (default: 0)")


def run(args) -> int:
    check_at_least_one(beam=args.beam)
    model = load_model_shown(args.model)
    outputs = translate(model, list(args.texts), beam=args.beam,
                        max_new_tokens=args.max_new_tokens, min_new_tokens=args.min_new_tokens,
                        alpha=args.alpha)
    for line in outputs:
        sys.stdout.write(line + "\n")
    return 0
