"""`glassformer eval --model MODEL --data FILE`: loss and perplexity of a model on a text file."""
from __future__ import annotations

import json

from glassformer.cli.common import model_help
from glassformer.io.named_models import load_model
from glassformer.train.data import read_text
from glassformer.train.evaluate import evaluate_text

NAME = "eval"
HELP = "report loss and perplexity of a model on a text file"


def add_arguments(parser) -> None:
    parser.add_argument("--model", required=True, help=model_help("model to score"))
    parser.add_argument("--data", required=True, help="UTF-8 text file to score")
    parser.add_argument("--block-size", type=int, default=None,
                        help="tokens per window (default: the model's context)")
    parser.add_argument("--batch-size", type=int, default=8,
                        help="windows per forward pass (default: 8)")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object {loss, perplexity, tokens} instead of a line")


def run(args) -> int:
    model = load_model(args.model)
    result = evaluate_text(model, read_text(args.data), block_size=args.block_size,
                           batch_size=args.batch_size)
    if args.json:
        print(json.dumps(result._asdict()))
    else:
        print(f"loss {result.loss:.4f} nats/token, perplexity {result.perplexity:.3f} "
              f"over {result.tokens} tokens")
    return 0
