"""`glassformer heads`: induction, previous-token and duplicate-token scores of every head, on
repeated random tokens as ARENA defines them (glassformer/interpret/heads.py).

    glassformer heads --model smollm2 --kind induction
"""
from __future__ import annotations

import json

from glassformer.cli.common import (add_cache_argument, add_model_argument, load_model_shown)
from glassformer.cli.interp_html import add_html_arguments, check_html, write_html
from glassformer.interpret.heads import OFFSETS, THRESHOLD, head_scores, strong_heads
from glassformer.interpret.render import heads_text
from glassformer.tokenizers.end_of_text import end_of_text_ids
from glassformer.viewer.interp_page import heads_section, interp_page_data

NAME = "heads"
HELP = "head detectors: induction, previous-token and duplicate-token scores per head"


def add_arguments(parser) -> None:
    add_model_argument(parser, "the causal LM to score")
    parser.add_argument("--kind", choices=[*OFFSETS, "all"], default="induction",
                        help="which score (default induction)")
    parser.add_argument("--seq-len", type=int, default=50,
                        help="random tokens per copy (default 50, as ARENA)")
    parser.add_argument("--batch", type=int, default=4, help="random sequences (default 4)")
    parser.add_argument("--bos", type=int, default=None,
                        help="the id put before the two copies (default: the tokenizer's first "
                             "end-of-text token, <|endoftext|>, if it has one, else 0)")
    parser.add_argument("--threshold", type=float, default=THRESHOLD,
                        help=f"name the heads above this score (default {THRESHOLD})")
    add_cache_argument(parser)
    parser.add_argument("--json", action="store_true", help="print the scores as JSON")
    add_html_arguments(parser, "the layers x heads grids")


def _bos(model, given):
    if given is not None or model.tokenizer is None:
        return given
    ids = end_of_text_ids(model.tokenizer)
    return ids[0] if ids else None


def run(args) -> int:
    check_html(args)
    model = load_model_shown(args.model)
    kinds = list(OFFSETS) if args.kind == "all" else [args.kind]
    bos = _bos(model, args.bos)
    payload, texts, grids = {}, [], {}
    for kind in kinds:
        scores = head_scores(model, kind, seq_len=args.seq_len, batch=args.batch,
                             seed=args.seed, bos=bos, max_cache_mb=args.max_cache_mb)
        strong = strong_heads(scores, args.threshold)
        grids[kind] = scores
        payload[kind] = {"scores": scores.tolist(),
                         "above": [{"layer": l, "head": h, "score": s} for l, h, s in strong]}
        texts.append(heads_text(kind, scores, strong, args.threshold))
    print(json.dumps(payload) if args.json else "\n\n".join(texts))
    write_html(args, interp_page_data(str(args.model), heads=heads_section(
        grids, threshold=args.threshold, seq_len=args.seq_len, batch=args.batch,
        seed=args.seed)))
    return 0
