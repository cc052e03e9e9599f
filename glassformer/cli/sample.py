"""`glassformer sample`: continue a prompt with a model trained by `glassformer train`."""
from __future__ import annotations

import sys

from glassformer.cli.generate import add_sampling_arguments, print_stream, report_speed, sampling_kwargs

NAME = "sample"
HELP = "continue a prompt with a trained checkpoint, streaming the text (nanoGPT's sample.py)"


def add_arguments(parser) -> None:
    parser.add_argument("--ckpt", default="out",
                        help="run or checkpoint folder written by glassformer train (default: out)")
    parser.add_argument("--prompt", default="\n",
                        help="text to continue (default: a newline, as nanoGPT); every character "
                             "must be in the training corpus")
    add_sampling_arguments(parser, max_new_tokens=500, temperature=0.8, top_p=None)
    parser.set_defaults(top_k=200)


def run(args) -> int:
    from glassformer.generate.stream import stream_generate
    from glassformer.io.pretrained import load_pretrained

    model = load_pretrained(args.ckpt)
    steps = stream_generate(model, args.prompt, **sampling_kwargs(args))
    sys.stdout.write(args.prompt)
    n_tokens, seconds = print_stream(steps)
    sys.stdout.write("\n")
    report_speed(n_tokens, seconds)
    return 0
