"""`glassformer generate`: continue a prompt with a model, streaming the text as it is chosen."""
from __future__ import annotations

import sys
import time

from glassformer.io.named_models import NAMED_MODELS

NAME = "generate"
HELP = "continue a prompt with a model (a .gguf file, an HF folder, a glassformer run, smollm2)"
MODEL_HELP = ("model to load: a .gguf file, a Hugging Face folder (config.json + "
              "model.safetensors), a glassformer training run folder, or a name: "
              + ", ".join(f"{name} ({entry.about})" for name, entry in NAMED_MODELS.items()))


def add_sampling_arguments(parser, *, max_new_tokens: int, temperature: float,
                           top_p: float | None) -> None:
    """The sampling flags `generate` and `chat` share."""
    parser.add_argument("--max-new-tokens", type=int, default=max_new_tokens,
                        help=f"most tokens to generate (default: {max_new_tokens})")
    parser.add_argument("--temperature", type=float, default=temperature,
                        help=f"softmax temperature; 0 picks the most likely token (greedy) "
                             f"(default: {temperature})")
    parser.add_argument("--top-k", type=int, default=None,
                        help="sample only among the k most likely tokens (default: off)")
    parser.add_argument("--top-p", type=float, default=top_p,
                        help=f"sample only from the smallest set of tokens whose probability "
                             f"reaches p (nucleus) (default: {top_p or 'off'})")
    parser.add_argument("--no-cache", action="store_true",
                        help="recompute the whole sequence at every step instead of using the "
                             "KV cache (slower; for comparing)")


def sampling_kwargs(args) -> dict:
    """The generate() keyword arguments from the shared flags."""
    return dict(max_new_tokens=args.max_new_tokens, temperature=args.temperature,
                top_k=args.top_k, top_p=args.top_p, seed=args.seed, use_cache=not args.no_cache)


def add_arguments(parser) -> None:
    parser.add_argument("--model", required=True, help=MODEL_HELP)
    add_sampling_arguments(parser, max_new_tokens=64, temperature=0.8, top_p=None)
    parser.add_argument("prompt", help="the text to continue")


def print_stream(steps) -> tuple[int, float]:
    """Print each step's new text as it arrives; returns (tokens, seconds)."""
    start = time.perf_counter()
    n_tokens = 0
    for step in steps:
        n_tokens += step.token_id is not None
        if step.text:
            sys.stdout.write(step.text)
            sys.stdout.flush()
    return n_tokens, time.perf_counter() - start


def report_speed(n_tokens: int, seconds: float) -> None:
    rate = n_tokens / seconds if seconds > 0 else float("inf")
    print(f"[{n_tokens} tokens in {seconds:.2f} s, {rate:.1f} tokens/s]", file=sys.stderr)


def run(args) -> int:
    from glassformer.generate.stream import stream_generate
    from glassformer.io.named_models import load_model

    model = load_model(args.model)
    steps = stream_generate(model, args.prompt, **sampling_kwargs(args))
    n_tokens, seconds = print_stream(steps)
    sys.stdout.write("\n")
    report_speed(n_tokens, seconds)
    return 0
