"""`glassformer attention`: the seed's self-attention example, step by step, forward and backward.

The front door of `explain attention` (explain/parts/attention.py), in the seed's own layout:
both masks side by side with --compare, and a flat JSON object with --json.
"""
from __future__ import annotations

import json
import os

from glassformer.cli.common import detect_lang
from glassformer.explain.parts import explain_part
from glassformer.explain.parts.attention import RANDOM_SIZES, render_compare, seed_json
from glassformer.explain.render import render_text
from glassformer.viewer.seed_page import write_seed_page

NAME = "attention"
HELP = "walk through self-attention by hand (the seed's 3-token example), forward and backward"


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
    parser.add_argument("--html", default=None, metavar="PAGE",
                        help="write the walkthrough as one offline HTML page (causal and "
                             "bidirectional side by side, English/中文 switch) instead")


def _sizes(args) -> dict:
    """The sizes to ask for: none (the seed's numbers), or, with --seed alone, the seed's sizes
    (random numbers)."""
    sizes = {"seq": args.seq, "d_model": args.d_model, "d_k": args.d_k, "batch": args.batch}
    if args.seed is not None and all(value is None for value in sizes.values()):
        return dict(RANDOM_SIZES)
    return sizes


def run(args) -> int:
    lang = args.lang or detect_lang(os.environ)
    seed = 0 if args.seed is None else args.seed
    if args.html:  # the page always shows both masks and the backward pass
        path = write_seed_page(args.html, _sizes(args), lang=lang, seed=seed, grad=args.grad)
        print(f"wrote {path}")
        return 0
    grad = args.grad if args.backward else None
    modes = [False, True] if args.compare else [args.bidirectional]
    results = [explain_part("attention", {**_sizes(args), "bidirectional": bidirectional},
                            seed=seed, grad=grad) for bidirectional in modes]
    if args.json:
        payload = seed_json(results[0]) if len(results) == 1 else {
            "causal": seed_json(results[0]), "bidirectional": seed_json(results[1])}
        print(json.dumps(payload))
        return 0
    for result in results:
        print(render_text(result, lang))
    if args.compare:
        print(render_compare(results[0], results[1], lang))
    return 0
