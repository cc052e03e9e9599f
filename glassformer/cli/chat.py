"""`glassformer chat`: talk with a chat model (its own chat template), streaming each reply."""
from __future__ import annotations

import sys

from glassformer.cli.common import (add_sampling_arguments, model_help, print_stream,
                                    report_speed, sampling_kwargs)
from glassformer.generate.chat import open_chat

NAME = "chat"
HELP = "chat with a model that has a chat template (e.g. --model smollm2); multi-turn on stdin"
EXIT_WORDS = ("/exit", "/quit")
RESET_WORD = "/reset"


def add_arguments(parser) -> None:
    parser.add_argument("--model", required=True,
                        help=model_help("chat model to load (it needs a chat template)"))
    parser.add_argument("--message", default=None,
                        help="send this one message, print the reply and exit (no prompt loop)")
    parser.add_argument("--system", default=None,
                        help="system prompt (default: the one the chat template adds, if any)")
    parser.add_argument("--stats", action="store_true",
                        help="print tokens/s on stderr after each reply")
    # SmolLM2-Instruct's model card recommends temperature 0.2 and top-p 0.9.
    add_sampling_arguments(parser, max_new_tokens=256, temperature=0.2, top_p=0.9)


def reply(session, text: str, args) -> None:
    n_tokens, seconds = print_stream(session.send(text, **sampling_kwargs(args)))
    sys.stdout.write("\n")
    sys.stdout.flush()
    if args.stats:
        report_speed(n_tokens, seconds)


def run(args) -> int:
    session = open_chat(args.model, system=args.system)
    if session.template.fallback:
        print("note: this model's files hold no chat template; chatting in ChatML, which it may "
              "not have been trained on", file=sys.stderr)
    if args.message is not None:
        reply(session, args.message, args)
        return 0
    interactive = sys.stdin.isatty()
    if interactive:
        print(f"chatting with {args.model}: {RESET_WORD} starts over, "
              f"{' or '.join(EXIT_WORDS)} (or Ctrl-D) ends", file=sys.stderr)
    while True:
        if interactive:
            print("you> ", end="", file=sys.stderr, flush=True)
        line = sys.stdin.readline()
        if not line or line.strip() in EXIT_WORDS:
            return 0
        text = line.strip()
        if text == RESET_WORD:
            session.messages = session.messages[:1] if args.system else []
            continue
        if text:
            reply(session, text, args)
