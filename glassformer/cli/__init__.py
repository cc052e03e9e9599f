"""Command line: `glassformer <command>` / `python -m glassformer <command>`.

Each command lives in its own module in this package with NAME, HELP, `add_arguments(parser)` and
`run(args) -> int`. Commands only parse arguments and call the library. Errors on bad input become
one line on stderr and exit code 2, never a traceback.
"""
from __future__ import annotations

import argparse
import importlib
import sys

from glassformer.allocator import keep_freed_memory
from glassformer.errors import GlassformerError

# Module names under glassformer.cli, in the order `--help` lists them.
COMMAND_MODULES = [
    "attention",
    "explain",
    "gradcheck",
    "train",
    "sample",
    "eval",
    "convert",
    "tokenize",
    "tokenizer",
    "generate",
    "chat",
    "embed",
]


def _load_commands():
    return [importlib.import_module(f"glassformer.cli.{name}") for name in COMMAND_MODULES]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="glassformer",
        description="A Transformer you can see through: every forward and backward pass by hand.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in _load_commands():
        cmd = sub.add_parser(module.NAME, help=module.HELP, description=module.HELP)
        # subtle: one --seed action per command; a shared `parents=` action would let one
        # command's set_defaults(seed=...) change every other command's default.
        cmd.add_argument("--seed", type=int, default=0,
                         help="seed for every random choice this command makes")
        module.add_arguments(cmd)
        cmd.set_defaults(run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    keep_freed_memory()  # reuse freed activation buffers instead of page-faulting new ones
    try:
        return int(args.run(args) or 0)
    except (GlassformerError, ValueError, OSError) as err:
        message = str(err).splitlines()[0] if str(err) else type(err).__name__
        print(f"glassformer {args.command}: error: {message}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"glassformer {args.command}: interrupted", file=sys.stderr)
        return 130
