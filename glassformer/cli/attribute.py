"""`glassformer attribute`: direct logit attribution, the share of every head, every MLP and
the embeddings in the logit of a target token (minus another's) at a prompt's last position.

    glassformer attribute --model smollm2 --prompt "The Eiffel Tower is in the city of" \
        --target " Paris" --other " Rome"
"""
from __future__ import annotations

import json

from glassformer.cli.common import (add_cache_argument, add_model_argument, load_model_shown,
                                     one_token, tokens_of)
from glassformer.cli.interp_html import add_html_arguments, check_html, write_html
from glassformer.interpret.attribution import logit_attribution
from glassformer.interpret.render import attribution_json, attribution_text
from glassformer.viewer.interp_page import attribution_section, interp_page_data

NAME = "attribute"
HELP = "direct logit attribution: each head's and MLP's share of a target token's logit"


def add_arguments(parser) -> None:
    add_model_argument(parser, "the causal LM to read")
    parser.add_argument("--prompt", required=True, help="the text; its last position is read")
    parser.add_argument("--target", required=True, help="the token whose logit is split, one "
                        "token (' Paris')")
    parser.add_argument("--other", default=None,
                        help="a second token: split the logit difference target - other")
    parser.add_argument("--top", type=int, default=15, help="terms to print (default 15)")
    add_cache_argument(parser)
    parser.add_argument("--json", action="store_true", help="print every term as JSON")
    add_html_arguments(parser, "the bar chart and the layers x heads grid")


def run(args) -> int:
    check_html(args)
    model = load_model_shown(args.model)
    ids = tokens_of(model, args.prompt)
    target = one_token(model, args.target, "--target")
    other = None if args.other is None else one_token(model, args.other, "--other")
    result = logit_attribution(model, ids, target, other, max_cache_mb=args.max_cache_mb)
    print(json.dumps(attribution_json(result)) if args.json else attribution_text(result,
                                                                                   args.top))
    write_html(args, interp_page_data(str(args.model), attribution=attribution_section(
        result, prompt=args.prompt, target=args.target, other=args.other)))
    return 0
