"""`glassformer chat`: talk with a chat model (its own chat template), streaming each reply.

At a terminal: line editing and history (the standard library's readline, where it exists),
Ctrl-C stops the reply being written and keeps the conversation (a second Ctrl-C at the prompt,
Ctrl-D or /exit ends it), and the commands of COMMANDS. A line starting with "/" is a command,
never a message: an unknown one is refused ("//text" sends "/text"). With stdin from a pipe it
reads one message per line and prints only the replies on stdout.

A line that is not UTF-8 text (a binary file piped in, a terminal in another encoding) is skipped
with one warning on stderr, and the conversation goes on: one bad line never loses the session.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

from glassformer.cli.common import (add_adapter_argument, add_model_argument,
                                    add_sampling_arguments, add_template_budget_arguments,
                                    loading_line, sampling_kwargs, template_budget)
from glassformer.errors import GlassformerError
from glassformer.generate.constrain import compile_schema, json_table, vocabulary_trie
from glassformer.json_object import read_json_object
from glassformer.memory import human_bytes
from glassformer.tasks.chat import ChatSession, open_chat

NAME = "chat"
HELP = "chat with a model that has a chat template (e.g. --model smollm2); multi-turn on stdin"
PROMPT = "you> "
COMMANDS = {
    "/help": "list these commands",
    "/reset": "start the conversation over (the system prompt stays)",
    "/system TEXT": "set the system prompt (the conversation stays); /system alone shows it",
    "/save FILE": "write the conversation to FILE as chat JSONL, one message per line",
    "/exit": "end the chat (also /quit, Ctrl-D, or Ctrl-C twice at the prompt)",
}
EXIT_WORDS = ("/exit", "/quit")


def add_arguments(parser) -> None:
    add_model_argument(parser, "chat model to load (it needs a chat template)")
    add_adapter_argument(parser)
    parser.add_argument("--message", default=None,
                        help="send this one message, print the reply and exit (no prompt loop)")
    parser.add_argument("--system", default=None,
                        help="system prompt (default: the one the chat template adds, if any)")
    parser.add_argument("--stats", action="store_true",
                        help="after each reply, print on stderr the prompt tokens read again "
                             "and reused from the KV cache, and prefill and decode tokens/s")
    # SmolLM2-Instruct's model card recommends temperature 0.2 and top-p 0.9.
    add_sampling_arguments(parser, max_new_tokens=256, temperature=0.2, top_p=0.9)
    add_template_budget_arguments(parser)
    parser.add_argument("--json-schema", metavar="FILE", default=None,
                        help="every reply is a JSON value this schema (a .json file) accepts "
                             "('json_object': any object); the subset of docs/serve.md")


def note(text: str) -> None:
    """One line for the person at the terminal, on stderr (stdout holds only replies)."""
    print(text, file=sys.stderr, flush=True)


def load(args) -> ChatSession:
    """open_chat, with a loading line at a terminal (a large model takes seconds)."""
    budget = template_budget(args)   # a bad limit: one line before the (slow) load
    with loading_line(args.model):
        session = open_chat(args.model, system=args.system, adapter=args.adapter,
                            template_budget=budget)
    if session.template.fallback:
        note("note: this model's files hold no chat template; chatting in ChatML, which it may "
             "not have been trained on")
    return session


def reply(session: ChatSession, text: str, args, constraint=None) -> None:
    """Stream one reply to stdout; Ctrl-C stops it, keeping what was written. constraint: a
    schema's MaskTable (--json-schema), or None."""
    stream = None
    kwargs = sampling_kwargs(args)
    if constraint is not None:
        kwargs["constraint"] = constraint
    try:
        stream = session.send(text, **kwargs)
        turn = session.turns[-1]
        if turn.dropped_messages:
            note(f"[the conversation outgrew the context of {session.model.context_len} "
                 f"tokens: the {turn.dropped_messages} oldest messages were dropped]")
        for step in stream:
            sys.stdout.write(step.text)
            sys.stdout.flush()
    except (KeyboardInterrupt, SystemError) as err:
        # note: a Ctrl-C that lands while a numba kernel's dispatcher runs comes out as
        # "SystemError: ... returned a result with an exception set", the KeyboardInterrupt its
        # cause; any other SystemError is a real one
        if isinstance(err, SystemError) and not isinstance(
                err.__cause__ or err.__context__, KeyboardInterrupt):
            raise
        if stream is not None:
            stream.close()  # the reply so far joins the conversation
        sys.stdout.write("\n")
        note("[stopped]")
        return
    sys.stdout.write("\n")
    sys.stdout.flush()
    if args.stats:
        note(turn_stats(session.turns[-1]))


def turn_stats(turn) -> str:
    """[prefill: N tokens read (M reused), X tok/s | decode: K tokens, Y tok/s]; a hybrid
    model's turn says when its reused tokens came from a turn checkpoint, and what the
    checkpoints hold (tasks/chat_checkpoints.py)."""
    prefill_rate = turn.prefilled_tokens / max(turn.prefill_seconds, 1e-9)
    decoded = max(turn.new_tokens - 1, 0)  # the first token comes with the prefill
    decode_rate = decoded / turn.decode_seconds if turn.decode_seconds > 0 else 0.0
    source = ("a turn checkpoint of the state" if turn.reused_from == "checkpoint"
              else "the cache")
    kept = (f", turn checkpoints hold {human_bytes(turn.checkpoint_bytes)}"
            if turn.checkpoint_bytes else "")
    return (f"[prefill: {turn.prefilled_tokens} tokens ({turn.reused_tokens} reused from "
            f"{source}{kept}) in {turn.prefill_seconds:.2f} s, {prefill_rate:.1f} tokens/s | "
            f"decode: {decoded} tokens in {turn.decode_seconds:.2f} s, {decode_rate:.1f} tokens/s]")


def system_prompt(session: ChatSession) -> str | None:
    messages = session.messages
    return messages[0]["content"] if messages and messages[0]["role"] == "system" else None


def command(session: ChatSession, line: str) -> bool:
    """Run one /command; False when the chat should end."""
    name, _, rest = line.partition(" ")
    rest = rest.strip()
    if name in EXIT_WORDS:
        return False
    if name == "/help":
        width = max(len(usage) for usage in COMMANDS)
        for usage, what in COMMANDS.items():
            note(f"  {usage:<{width}}  {what}")
        note("  a line starting with // sends the rest as a message: //help sends /help")
    elif name == "/reset":
        session.reset(system=system_prompt(session))
        note("[conversation reset]")
    elif name == "/system" and not rest:
        note(f"[system prompt: {system_prompt(session)!r}]")
    elif name == "/system":
        kept = session.messages[1:] if system_prompt(session) is not None else session.messages
        session.messages = [{"role": "system", "content": rest}] + kept
        note("[system prompt set]")
    elif name == "/save" and rest:
        save_chat(session.messages, Path(rest))
        note(f"[{len(session.messages)} messages written to {rest}]")
    elif name == "/save":
        note("[/save needs a file name: /save FILE]")
    else:
        note(f"[unknown command {line!r}; /help lists the commands]")
    return True


def save_chat(messages: list[dict], path: Path) -> None:
    """Chat JSONL: one {"role": ..., "content": ...} object per line, UTF-8 as written."""
    lines = [json.dumps({"role": m["role"], "content": m["content"]}, ensure_ascii=False)
             for m in messages]
    try:
        path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    except OSError as err:
        raise GlassformerError(f"cannot write {path}: {err.strerror}") from None


def read_line(interactive: bool) -> str | None:
    """The next line typed (None at end of input); Ctrl-C raises KeyboardInterrupt, and a line
    that is not UTF-8 raises UnicodeDecodeError after its bytes were consumed (the next call
    reads the next line).

    note: from a pipe the bytes are read a line at a time and decoded here; the text layer of
    sys.stdin decodes whole chunks, so one bad byte would cost the lines around it too.
    """
    if not interactive:
        raw = getattr(sys.stdin, "buffer", None)
        if raw is None:  # a text-only stdin (io.StringIO): nothing left to decode
            line = sys.stdin.readline()
            return line if line else None
        data = raw.readline()
        return data.decode("utf-8") if data else None
    try:
        return input(PROMPT)  # with readline loaded: arrow keys edit, up/down walk the history
    except EOFError:
        sys.stdout.write("\n")
        return None


def undecodable(number: int, err: UnicodeDecodeError) -> str:
    """The warning for input line `number` that is not UTF-8: which byte, where."""
    byte = err.object[err.start]
    return (f"warning: skipped input line {number}: not UTF-8 text (byte 0x{byte:02x} at "
            f"byte {err.start + 1}); the conversation goes on")


def line_editing() -> None:
    """Load readline where it exists: importing it gives input() editing and history."""
    try:
        import readline  # noqa: F401
    except ImportError:
        pass


def chat_loop(session: ChatSession, args, constraint=None) -> int:
    interactive = sys.stdin.isatty()
    if interactive:
        line_editing()
        note(f"chatting with {args.model}: /help lists the commands, Ctrl-C stops a reply, "
             "Ctrl-D or /exit ends")
    warned = False  # one Ctrl-C at the prompt warns, a second one in a row ends the chat
    number = 0      # input lines read, for the warning that names one
    while True:
        number += 1
        try:
            line = read_line(interactive)
        except UnicodeDecodeError as err:
            warned = False
            note(undecodable(number, err))
            continue
        except KeyboardInterrupt:
            if warned:
                sys.stdout.write("\n")
                return 0
            warned = True
            sys.stdout.write("\n")
            note("[Ctrl-C again, Ctrl-D or /exit ends the chat]")
            continue
        warned = False
        if line is None:
            return 0
        text = line.strip()
        try:
            if text.startswith("/") and not text.startswith("//"):
                if not command(session, text):
                    return 0
            elif text:
                reply(session, text[1:] if text.startswith("//") else text, args, constraint)
        except GlassformerError as err:
            if not interactive:
                raise
            note(f"error: {err}")  # at a terminal the conversation goes on


def run(args) -> int:
    schema = None
    if args.json_schema not in (None, "json_object"):       # checked before the model loads
        schema = read_json_object(Path(args.json_schema))
        compile_schema(schema)
    session = load(args)
    constraint = None
    if args.json_schema is not None:                         # replies end at the turn's end
        trie = vocabulary_trie(session.model.tokenizer, session.model.cfg.vocab_size)
        constraint = json_table(schema, trie, session.stop_ids(),
                                session.model.tokenizer.encode)
    if args.message is not None:
        reply(session, args.message, args, constraint)
        return 0
    return chat_loop(session, args, constraint)
