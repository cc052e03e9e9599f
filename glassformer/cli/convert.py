"""`glassformer convert`: any model glassformer reads -> a Hugging Face folder transformers loads."""
from __future__ import annotations

import sys

NAME = "convert"
HELP = ("convert a model (glassformer run, HF folder, .gguf, or a name such as smollm2) into a "
        "Hugging Face folder (config.json + model.safetensors + tokenizer)")


def add_arguments(parser) -> None:
    parser.add_argument("model", help="what to convert: a run/checkpoint folder, a Hugging Face "
                                      "folder, a .gguf file, or smollm2")
    parser.add_argument("--out", required=True, help="folder to write")


def run(args) -> int:
    from glassformer.io.named_models import load_model

    model = load_model(args.model)
    folder = model.save_pretrained(args.out)
    print(f"wrote {model.arch} model ({model.num_params():,} params) to {folder}", file=sys.stderr)
    return 0
