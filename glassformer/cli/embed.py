"""`glassformer embed`: sentence embeddings (mean pooling + L2 norm) and cosine similarities."""
from __future__ import annotations

import json

import numpy as np

from glassformer.cli.common import add_model_argument, check_at_least_one, load_model_shown
from glassformer.packaged import MODEL, resolve_path
from glassformer.tasks.embed import MAX_LENGTH, cosine_similarity, embed, max_length_of

NAME = "embed"
HELP = "embed texts with a BERT sentence encoder (e.g. --model minilm); prints cosine similarities"


def add_arguments(parser) -> None:
    add_model_argument(parser, "sentence encoder (BERT) to load, e.g. minilm")
    parser.add_argument("--max-length", type=int, default=None,
                        help="cut texts to this many tokens (default: the folder's "
                             "sentence_bert_config.json, else 256)")
    parser.add_argument("--dims", type=int, default=8,
                        help="embedding dimensions to show per text (default: 8; --json has all)")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object: texts, embeddings, similarity")
    parser.add_argument("texts", nargs="+", help="the texts to embed")


def format_table(texts: list[str], embeddings: np.ndarray, similarity: np.ndarray,
                 dims: int) -> str:
    """Readable text: a few dims of each embedding, then the similarity matrix."""
    lines = [f"embeddings: {embeddings.shape[0]} x {embeddings.shape[1]} (first {dims} dims)"]
    for k, (text, row) in enumerate(zip(texts, embeddings)):
        shown = " ".join(f"{value:+.4f}" for value in row[:dims])
        lines.append(f"[{k}] {shown} ...  {text[:40]!r}")
    lines.append("cosine similarity:")
    lines.append("     " + "".join(f"{f'[{k}]':>8}" for k in range(len(texts))))
    for k, row in enumerate(similarity):
        lines.append(f"{f'[{k}]':<5}" + "".join(f"{value:8.4f}" for value in row))
    return "\n".join(lines)


def run(args) -> int:
    check_at_least_one(dims=args.dims, max_length=args.max_length)
    path = resolve_path(args.model, MODEL)  # the folder also holds sentence_bert_config.json
    model = load_model_shown(path)
    max_length = args.max_length or max_length_of(path, MAX_LENGTH)
    embeddings = embed(model, args.texts, max_length=max_length)
    similarity = cosine_similarity(embeddings)
    if args.json:
        print(json.dumps({"model": str(path), "max_length": max_length, "texts": args.texts,
                          "embeddings": embeddings.tolist(), "similarity": similarity.tolist()}))
    else:
        print(format_table(args.texts, embeddings, similarity, args.dims))
    return 0
