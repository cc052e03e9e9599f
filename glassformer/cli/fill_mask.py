"""`glassformer fill-mask`: the top-k tokens a masked-LM BERT puts in each [MASK] of a text."""
from __future__ import annotations

import json

from glassformer.cli.common import add_model_argument, check_at_least_one, load_model_shown
from glassformer.tasks.fill_mask import MASK, fill_mask

NAME = "fill-mask"
HELP = ("the most likely tokens for each [MASK] in a text, with probabilities, from a BERT with a "
        "masked-LM head (a BertForMaskedLM folder or a `train --arch bert` run)")


def add_arguments(parser) -> None:
    add_model_argument(parser, "BERT with a masked-LM head to load")
    parser.add_argument("--top-k", type=int, default=5,
                        help="candidates shown for each [MASK] (default: 5)")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object: the text and, per [MASK], its candidates")
    parser.add_argument("text", help='the text, with [MASK] where a token is to be guessed, '
                                     'e.g. "床前明月[MASK]，疑是地上霜。"')


def format_candidates(text: str, candidates: list[list[tuple[str, float]]]) -> str:
    """The text with every [MASK] filled by its best guess, then one block per [MASK]."""
    best = text
    for options in candidates:
        best = best.replace(MASK, options[0][0], 1)
    lines = [best]
    for k, options in enumerate(candidates, start=1):
        lines.append(f"[MASK] {k} of {len(candidates)}:")
        for rank, (token, prob) in enumerate(options, start=1):
            lines.append(f"  {rank}. {shown(token)}  {prob:.4f}")
    return "\n".join(lines)


def shown(token: str) -> str:
    """A candidate as its own line can show it: a newline, tab or blank one written escaped, in
    quotes (JSON's escapes), so it neither breaks the list nor looks empty."""
    if token.strip() and token.isprintable():
        return token
    return json.dumps(token, ensure_ascii=False)


def run(args) -> int:
    check_at_least_one(top_k=args.top_k)
    model = load_model_shown(args.model)
    candidates = fill_mask(model, args.text, top_k=args.top_k)
    if args.json:
        print(json.dumps({"text": args.text, "masks": [[{"token": token, "prob": prob}
                                                         for token, prob in options]
                                                        for options in candidates]},
                         ensure_ascii=False))
    else:
        print(format_candidates(args.text, candidates))
    return 0
