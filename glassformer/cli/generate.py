"""`glassformer generate --model MODEL "prompt"`: continue a prompt, streaming the text as it is
chosen. MODEL is anything load_model reads, a training run folder included (this command is
also nanoGPT's sample.py: `--echo --top-k 200 --max-new-tokens 500` gives its output)."""
from __future__ import annotations

import sys

from glassformer.cli.common import (add_adapter_argument, add_dequantize_argument,
                                    add_model_argument,
                                    add_sampling_arguments, load_model_shown, print_stream,
                                    report_speed, sampling_kwargs)
from glassformer.generate.stream import stream_generate

NAME = "generate"
HELP = ("continue a prompt with a model (a glassformer training run, an HF folder, a .gguf, "
        "smollm2)")


def add_arguments(parser) -> None:
    add_model_argument(parser, "model to load")
    add_adapter_argument(parser)
    add_dequantize_argument(parser)
    parser.add_argument("prompt", nargs="?", default="\n",
                        help="the text to continue (default: a newline, as nanoGPT's sample.py); "
                             "for a char-level model every character must be in its corpus")
    parser.add_argument("--echo", action="store_true",
                        help="print the prompt before its continuation (as nanoGPT's sample.py)")
    add_sampling_arguments(parser, max_new_tokens=64, temperature=0.8, top_p=None)


def run(args) -> int:
    model = load_model_shown(args.model, args.adapter, args.dequantize)
    steps = stream_generate(model, args.prompt, **sampling_kwargs(args))
    if args.echo:
        sys.stdout.write(args.prompt)
    n_tokens, seconds = print_stream(steps)
    sys.stdout.write("\n")
    report_speed(n_tokens, seconds)
    return 0
