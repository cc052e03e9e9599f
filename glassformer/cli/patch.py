"""`glassformer patch`: activation patching of a clean prompt into a corrupted one.

    glassformer patch --model smollm2 --clean "The Eiffel Tower is in the city of" \
        --corrupt "The Colosseum is in the city of" --target " Paris" --other " Rome"

prints, for each kind (--kinds), the layers x positions table (layers x heads for z) of the
logit difference target - other, normalised so 1 is the clean run's and 0 the corrupted run's.
"""
from __future__ import annotations

import json

from glassformer.cli.common import (add_cache_argument, add_model_argument, load_model_shown,
                                     one_token, tokens_of)
from glassformer.cli.interp_html import add_html_arguments, check_html, write_html
from glassformer.interpret.attribution import attribution_patch
from glassformer.interpret.patching import KINDS, check_same_length, logit_diff_metric, patch
from glassformer.interpret.render import patching_json, patching_text
from glassformer.viewer.interp_page import interp_page_data, patching_section

NAME = "patch"
HELP = "activation patching: which layer and position carry a clean prompt's answer"


def add_arguments(parser) -> None:
    add_model_argument(parser, "the causal LM to patch")
    parser.add_argument("--clean", required=True, help="the clean prompt")
    parser.add_argument("--corrupt", required=True,
                        help="the corrupted prompt, the same number of tokens")
    parser.add_argument("--target", required=True, help="the clean answer, one token (' Paris')")
    parser.add_argument("--other", required=True,
                        help="the corrupted answer, one token (' Rome'): the metric is the "
                             "logit of --target minus that of --other at the last position")
    parser.add_argument("--kinds", default="resid_pre",
                        help=f"comma-separated, from {', '.join(KINDS)} (default resid_pre)")
    parser.add_argument("--attribution", action="store_true",
                        help="the first-order estimate (attribution patching: one forward and "
                             "one backward) instead of real patching")
    add_cache_argument(parser)
    parser.add_argument("--json", action="store_true", help="print the tables as JSON")
    add_html_arguments(parser, "the heat-maps")


def run(args) -> int:
    check_html(args)
    model = load_model_shown(args.model)
    clean, corrupt = tokens_of(model, args.clean), tokens_of(model, args.corrupt)
    check_same_length(clean[None], corrupt[None])
    target, other = one_token(model, args.target, "--target"), one_token(model, args.other,
                                                                         "--other")
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    if args.attribution:
        result = attribution_patch(model, clean, corrupt, target, other, kinds=kinds)
    else:
        result = patch(model, clean, corrupt, logit_diff_metric(target, other), kinds,
                       max_cache_mb=args.max_cache_mb)
    pieces = [model.tokenizer.decode([int(i)]) for i in clean]
    if args.json:
        print(json.dumps(patching_json(result, pieces)))
    else:
        print(patching_text(result, pieces))
    write_html(args, interp_page_data(str(args.model), patching=patching_section(
        result, pieces, clean_text=args.clean, corrupt_text=args.corrupt, target=args.target,
        other=args.other, estimate=args.attribution)))
    return 0
