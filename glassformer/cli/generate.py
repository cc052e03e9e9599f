"""`glassformer generate --model MODEL "prompt"`: continue a prompt, streaming the text as it is
chosen. MODEL is anything load_model reads, a training run folder included (this command is
also nanoGPT's sample.py: `--echo --top-k 200 --max-new-tokens 500` gives its output)."""
from __future__ import annotations

import os
import sys
from pathlib import Path

from glassformer.cli.common import (add_adapter_argument, add_dequantize_argument,
                                    add_model_argument,
                                    add_sampling_arguments, detect_lang, load_model_shown,
                                    print_stream, report_speed, sampling_kwargs)
from glassformer.cli.common import add_activation_quant_argument
from glassformer.errors import GlassformerError
from glassformer.generate.constrain import compile_schema, json_table, vocabulary_trie
from glassformer.generate.stream import stream_generate
from glassformer.json_object import read_json_object
from glassformer.tokenizers.end_of_text import end_of_text_ids
from glassformer.viewer.constrained_page import SCRIPTS, constrained_data, constrained_reply
from glassformer.viewer.page import write_page

NAME = "generate"
HELP = ("continue a prompt with a model (a glassformer training run, an HF folder, a .gguf, "
        "smollm2)")


def add_arguments(parser) -> None:
    add_model_argument(parser, "model to load")
    add_adapter_argument(parser)
    add_dequantize_argument(parser)
    add_activation_quant_argument(parser)
    parser.add_argument("prompt", nargs="?", default="\n",
                        help="the text to continue (default: a newline, as nanoGPT's sample.py); "
                             "for a char-level model every character must be in its corpus")
    parser.add_argument("--echo", action="store_true",
                        help="print the prompt before its continuation (as nanoGPT's sample.py)")
    add_sampling_arguments(parser, max_new_tokens=64, temperature=0.8, top_p=None)
    parser.add_argument("--json-schema", metavar="FILE", default=None,
                        help="write a JSON value this schema (a .json file) accepts, ending "
                             "when the value ends (the subset of docs/serve.md; 'json_object': "
                             "any JSON object)")
    parser.add_argument("--html", metavar="FILE", default=None,
                        help="with --json-schema: also write an offline page of the reply, step "
                             "by step: how many tokens the mask allowed and the model's top "
                             "choices it removed")
    parser.add_argument("--lang", choices=["en", "zh"], default=None,
                        help="the --html page's language (default: from the environment)")


def run(args) -> int:
    schema = None
    if args.json_schema not in (None, "json_object"):       # checked before the model loads
        schema = read_json_object(Path(args.json_schema))
        compile_schema(schema)
    if args.html is not None:
        check_page_arguments(args)
    model = load_model_shown(args.model, args.adapter, args.dequantize, args.activation_quant)
    kwargs = sampling_kwargs(args)
    if args.json_schema is not None:
        kwargs["constraint"] = schema_table(model, schema)
    if args.html is not None:
        return run_page(args, model, schema, kwargs)
    steps = stream_generate(model, args.prompt, **kwargs)
    if args.echo:
        sys.stdout.write(args.prompt)
    n_tokens, seconds = print_stream(steps)
    sys.stdout.write("\n")
    report_speed(n_tokens, seconds)
    return 0


def schema_table(model, schema: dict | None):
    """The MaskTable of a schema (None: any object), ended by the tokenizer's end-of-text ids
    (the ids generate stops at)."""
    if model.tokenizer is None:
        raise GlassformerError("--json-schema needs a model with a tokenizer")
    stop = end_of_text_ids(model.tokenizer)
    if not stop:
        raise GlassformerError("--json-schema needs a tokenizer with an end-of-text token, to "
                               "end the reply when the value ends")
    trie = vocabulary_trie(model.tokenizer, model.cfg.vocab_size)
    return json_table(schema, trie, stop, model.tokenizer.encode)


def check_page_arguments(args) -> None:
    """--html needs --json-schema and a folder that exists (checked before the model loads)."""
    if args.json_schema is None:
        raise GlassformerError("--html shows a constrained generation: give --json-schema FILE "
                               "(or --json-schema json_object) too")
    if not Path(args.html).resolve().parent.is_dir():
        raise GlassformerError(f"cannot write {args.html}: its folder does not exist")


def run_page(args, model, schema, kwargs) -> int:
    """Write the reply (stdout) and its page, step by step (--html)."""
    table = kwargs.pop("constraint")
    prompt_ids = model.tokenizer.encode(args.prompt)
    reply = constrained_reply(model, prompt_ids, table, **kwargs)
    data = constrained_data(model, prompt_ids, reply, table, name=str(args.model),
                            schema=schema)
    if args.echo:
        sys.stdout.write(args.prompt)
    sys.stdout.write(data["reply"] + "\n")
    write_page(args.html, data, title=f"constrained generation · {args.model}",
               lang=args.lang or detect_lang(os.environ), scripts=SCRIPTS)
    print(f"wrote {args.html}", file=sys.stderr)
    return 0
