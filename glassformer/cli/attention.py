"""`glassformer attention`: the seed's self-attention example, step by step, forward and backward."""
from __future__ import annotations

import json
import os

import numpy as np

from glassformer.errors import GlassformerError
from glassformer.explain.seed_example import random_inputs, seed_inputs
from glassformer.explain.walkthrough import (render_compare, render_text, run_walkthrough,
                                             to_json, upstream_gradient)

NAME = "attention"
HELP = "walk through self-attention by hand (the seed's 3-token example), forward and backward"


def detect_lang(environ) -> str:
    """Chinese when the locale says so (LC_ALL, LC_MESSAGES, LANG, LANGUAGE), else English."""
    for var in ("LC_ALL", "LC_MESSAGES", "LANG", "LANGUAGE"):
        value = environ.get(var, "")
        if value:
            return "zh" if value.lower().startswith("zh") else "en"
    return "en"


def add_arguments(parser) -> None:
    # note: an explicit --seed here means "random inputs", so this command tells it from no seed.
    parser.set_defaults(seed=None)
    parser.add_argument("--lang", choices=["zh", "en"], default=None,
                        help="language of labels and explanations (default: from the locale)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--bidirectional", action="store_true",
                      help="no causal mask: encoder/BERT-style attention")
    mode.add_argument("--compare", action="store_true",
                      help="show causal and bidirectional weights side by side")
    parser.add_argument("--backward", action="store_true",
                        help="continue with the backward pass of L = sum(output * G)")
    parser.add_argument("--grad", choices=["ones", "random"], default="ones",
                        help="upstream gradient G for --backward (default: ones)")
    parser.add_argument("--seq", type=int, default=None, help="random input: tokens T")
    parser.add_argument("--d-model", type=int, default=None, help="random input: width C")
    parser.add_argument("--d-k", type=int, default=None, help="random input: head width D")
    parser.add_argument("--batch", type=int, default=None, help="random input: batch B")
    parser.add_argument("--json", action="store_true",
                        help="print every array as JSON under stable keys instead of prose")


def _inputs(args, rng):
    sizes = {"seq": args.seq, "d_model": args.d_model, "d_k": args.d_k, "batch": args.batch}
    if args.seed is None and all(value is None for value in sizes.values()):
        return seed_inputs()
    defaults = {"seq": 3, "d_model": 4, "d_k": 2, "batch": 1}
    chosen = {name: defaults[name] if value is None else value for name, value in sizes.items()}
    for name, value in chosen.items():
        if value < 1:
            raise GlassformerError(f"--{name.replace('_', '-')} must be at least 1, got {value}")
    return random_inputs(rng, **chosen)


def run(args) -> int:
    lang = args.lang or detect_lang(os.environ)
    rng = np.random.default_rng(0 if args.seed is None else args.seed)
    inputs = _inputs(args, rng)
    batch, seq = inputs["X"].shape[:2]
    d_k = inputs["Wv"].shape[1]
    dout = upstream_gradient(args.grad, (batch, seq, d_k), rng) if args.backward else None
    modes = [True, False] if args.compare else [not args.bidirectional]
    walks = [run_walkthrough(inputs, causal=causal, dout=dout) for causal in modes]
    if args.json:
        payload = to_json(walks[0]) if len(walks) == 1 else {
            "causal": to_json(walks[0]), "bidirectional": to_json(walks[1])}
        print(json.dumps(payload))
        return 0
    for walk in walks:
        print(render_text(walk, lang))
    if args.compare:
        print(render_compare(walks[0], walks[1], lang))
    return 0
