"""`glassformer convert --model MODEL --out DIR`: any model glassformer reads -> a Hugging Face
folder that transformers loads."""
from __future__ import annotations

import sys

from glassformer.cli.common import load_model_shown, model_help
from glassformer.io.pretrained import save_pretrained

NAME = "convert"
HELP = ("convert a model (glassformer run, HF folder, .gguf, or a name such as smollm2) into a "
        "Hugging Face folder (config.json + model.safetensors + tokenizer)")


def add_arguments(parser) -> None:
    parser.add_argument("--model", required=True, help=model_help("model to convert"))
    parser.add_argument("--out", required=True, help="folder to write")


def run(args) -> int:
    model = load_model_shown(args.model)
    folder = save_pretrained(model, args.out)
    print(f"wrote {model.arch} model ({model.num_params():,} params) to {folder}", file=sys.stderr)
    return 0
