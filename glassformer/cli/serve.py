"""`glassformer serve`: an OpenAI-compatible HTTP server for one model (glassformer/serve/)."""
from __future__ import annotations

from pathlib import Path

from glassformer.cli.common import (add_adapter_argument, add_dequantize_argument,
                                    add_model_argument,
                                    add_template_budget_arguments, check_at_least_one,
                                    load_model_shown, template_budget)
from glassformer.cli.common import add_activation_quant_argument
from glassformer.errors import GlassformerError
from glassformer.packaged import MODEL, resolve_path
from glassformer.serve.budget import RATIO
from glassformer.serve.run import serve
from glassformer.tasks.embed import MAX_LENGTH, max_length_of

NAME = "serve"
HELP = ("serve a model over OpenAI's HTTP API (completions, chat, embeddings) with a chat page "
        "at / (e.g. --model smollm2)")


def add_arguments(parser) -> None:
    add_model_argument(parser, "model to serve: a causal LM (completions, chat) or a sentence "
                               "encoder such as minilm (embeddings)")
    add_adapter_argument(parser)
    add_dequantize_argument(parser)
    add_activation_quant_argument(parser)
    parser.add_argument("--host", default="127.0.0.1",
                        help="address to listen on (default: 127.0.0.1, this machine only; "
                             "0.0.0.0 opens it to the network)")
    parser.add_argument("--port", type=int, default=8000,
                        help="port (default: 8000; 0 lets the system pick a free one, which "
                             "the first log line shows)")
    parser.add_argument("--api-key", default=None,
                        help="require 'Authorization: Bearer KEY' on /v1 requests")
    parser.add_argument("--max-batch", type=int, default=8,
                        help="replies decoded together, each in a KV cache row (default: 8)")
    parser.add_argument("--max-queue", type=int, default=64,
                        help="requests that may wait for a row; past it the server answers "
                             "429 (default: 64)")
    parser.add_argument("--context", type=int, default=None,
                        help="longest prompt + reply served, in tokens (default: the model's "
                             "context); the KV cache holds --max-batch rows of it")
    parser.add_argument("--prefill-chunk", default=str(PREFILL_CHUNK),
                        help="feed a joining prompt this many tokens at a time, inside the "
                             "decode steps of the running replies (LLaMA-family models; else "
                             "between them), so they keep their pace; 'auto' sizes each chunk "
                             "to --prefill-budget; 0 feeds it in one piece "
                             f"(default: {PREFILL_CHUNK}; 'auto' keeps the streams' pace "
                             "better, see docs/serve.md)")
    parser.add_argument("--prefill-budget", type=float, default=RATIO, metavar="R",
                        help="with --prefill-chunk auto, a step that feeds a chunk and decodes "
                             "the running replies takes at most R decode steps, as measured "
                             f"while serving (default: {RATIO}; > 1)")
    parser.add_argument("--prefill-apart", action="store_true",
                        help="feed each prefill chunk as a forward of its own between decode "
                             "steps, instead of inside the decode step (the mixed step, "
                             "LLaMA-family models); for comparison (docs/serve.md)")
    parser.add_argument("--batch-invariant", action="store_true",
                        help="compute each reply's numbers the same alone or beside others, so "
                             "a seeded sampled reply does not depend on the load (every step "
                             "computes --max-batch rows; each joining prompt is prefilled on its "
                             "own, whole; docs/serve.md)")
    add_template_budget_arguments(parser)
    parser.add_argument("--reasoning-budget", type=int, default=None, metavar="N",
                        help="a reasoning model (<think> ... </think>) thinks at most N tokens "
                             "per reply; then </think> is written for it and it answers "
                             "(default: no limit)")


PREFILL_CHUNK = 64    # a few decode steps of 8 rows on SmolLM2: docs/performance.md


def prefill_chunk(text: str) -> int | None:
    """--prefill-chunk: None for 'auto' (budget.py sizes each chunk), else ids per chunk."""
    if text == "auto":
        return None
    try:
        chunk = int(text)
    except ValueError:
        chunk = -1
    if chunk < 0:
        raise GlassformerError(f"--prefill-chunk must be 'auto' or a count >= 0 (0: one piece), "
                               f"got {text!r}")
    return chunk


def served_name(model: str) -> str:
    """The name clients use: a packaged name as given, a path's last part."""
    return Path(model).name if Path(model).exists() else model


def run(args) -> int:
    check_at_least_one(max_batch=args.max_batch, max_queue=args.max_queue,
                       context=args.context)
    chunk = prefill_chunk(args.prefill_chunk)
    if not args.prefill_budget > 1.0:
        raise GlassformerError(f"--prefill-budget must be > 1 (decode steps a mixed step may "
                               f"take), got {args.prefill_budget}")
    if not 0 <= args.port <= 65535:
        raise GlassformerError(f"--port must be in 0..65535, got {args.port}")
    if args.reasoning_budget is not None and args.reasoning_budget < 0:
        raise GlassformerError(f"--reasoning-budget must be >= 0, got {args.reasoning_budget}")
    budget = template_budget(args)
    model = load_model_shown(args.model, adapter=args.adapter,
                             dequantize=args.dequantize,
                             activations=args.activation_quant)
    embed_max_length = max_length_of(resolve_path(args.model, MODEL), MAX_LENGTH)
    return serve(model, served_name(args.model), host=args.host, port=args.port,
                 api_key=args.api_key, max_batch=args.max_batch, max_queue=args.max_queue,
                 context=args.context, embed_max_length=embed_max_length,
                 template_budget=budget, prefill_chunk=chunk,
                 prefill_budget=args.prefill_budget,
                 reasoning_budget=args.reasoning_budget,
                 batch_invariant=args.batch_invariant,
                 mixed_step=not args.prefill_apart)
