"""Command line: `glassformer <command>` / `python -m glassformer <command>`.

Each command lives in its own module in this package with NAME, HELP, `add_arguments(parser)` and
`run(args) -> int`; what several commands share (--seed, --model, the sampling flags) is in
common.py. Commands only parse arguments and call the library. Errors on bad input become one line
on stderr and exit code 2, never a traceback.

Every command that takes a model takes it as `--model`, and the same things: a .gguf file, a
Hugging Face folder, a glassformer training run (so `generate --model RUN` is nanoGPT's sample.py),
or a name from glassformer/packaged.py such as smollm2.
"""
from __future__ import annotations

import argparse
import os
import sys

from glassformer.allocator import keep_freed_memory
from glassformer.cli import (attention, chat, convert, embed, explain, fill_mask, finetune,
                             generate, gradcheck, show, tokenizer, train, translate)
from glassformer.cli import serve  # the OpenAI-compatible server (glassformer/serve/)
from glassformer.cli import eval as eval_command  # note: `as`, not to hide the builtin eval
from glassformer.cli import notebooks
from glassformer.cli import attribute, heads, patch  # interpretability (glassformer/interpret/)
from glassformer.cli import sae  # sparse autoencoders (glassformer/interpret/sae/)
from glassformer.cli import quantize  # GGUF files in ops/quant/'s block formats
from glassformer.cli.common import add_seed_argument, blas_sized_to_free_cores
from glassformer.errors import GlassformerError
from glassformer.kernels.choice import CHOICES, KERNELS_ENV, kernel_choice
from glassformer.version import package_version

# The command modules, in the order `--help` lists them.
COMMANDS = [attention, explain, gradcheck, train, finetune, eval_command, convert, tokenizer,
            generate, chat, embed, fill_mask, translate, show, serve, notebooks,
            patch, attribute, heads, sae, quantize]


class ShowVersion(argparse.Action):
    """`--version`: print "glassformer X.Y.Z" on stdout and exit 0, as argparse's "version"
    action does, but look the version up only when asked (the lookup reads the installed
    packages' metadata: tens of ms every command would pay)."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"glassformer {package_version()}")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="glassformer",
        description="A Transformer you can see through: every forward and backward pass by hand.")
    parser.add_argument("--version", action=ShowVersion, help="print glassformer's version and exit")
    parser.add_argument("--kernels", choices=CHOICES, default=None,
                        help="numpy: the reference NumPy path everywhere; numba: the compiled "
                             "kernels (the fast extra); auto: numba when installed (default: "
                             f"${KERNELS_ENV}, else auto)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in COMMANDS:
        cmd = sub.add_parser(module.NAME, help=module.HELP, description=module.HELP)
        add_seed_argument(cmd)
        module.add_arguments(cmd)
        cmd.set_defaults(run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    keep_freed_memory()  # reuse freed activation buffers instead of page-faulting new ones
    if args.kernels is not None:  # for this command and any process it starts
        os.environ[KERNELS_ENV] = args.kernels
    try:
        kernel_choice()  # a bad setting, or numba asked for but absent: one line, before any work
        with blas_sized_to_free_cores():
            status = int(args.run(args) or 0)
        sys.stdout.flush()  # here, not at exit: a reader that has gone is met inside the try
        return status
    except BrokenPipeError:
        return quiet_broken_pipe()
    except (GlassformerError, ValueError, OSError) as err:
        message = str(err).splitlines()[0] if str(err) else type(err).__name__
        print(f"glassformer {args.command}: error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"glassformer {args.command}: interrupted", file=sys.stderr)
        return 130


def quiet_broken_pipe() -> int:
    """Stdout's reader has gone (`glassformer gradcheck | head -1`): end quietly, as Unix tools do.

    Exit status 141 is 128 + SIGPIPE, what a shell shows for a tool the signal ended.
    note: stdout is pointed at /dev/null first, or Python's own flush at exit meets the closed
    pipe again and prints "Exception ignored ... BrokenPipeError".
    """
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 141
