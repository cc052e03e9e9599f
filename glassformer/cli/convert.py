"""`glassformer convert --model MODEL --out DIR`: any model glassformer reads -> a Hugging Face
folder that transformers loads. `--adapter DIR --merge OUT` folds a LoRA adapter into the weights
(W + s A B, as peft's merge_and_unload) and writes the merged model to OUT.

`--out FILE.gguf` writes a Gemma 3, Qwen3-Next or Qwen3.5 model in llama.cpp's GGUF names instead
(io/gguf_hf.py: float32 tensors and metadata, no tokenizer), which `glassformer quantize` shrinks.

The folder written must be new or empty: config.json, model.safetensors and the tokenizer's files
would otherwise land among what it holds (a training run, another model). --force writes into a
folder that is not empty. The check comes before the model loads, so a refusal costs nothing.
"""
from __future__ import annotations

import sys
from itertools import islice
from pathlib import Path

from glassformer.cli.common import add_adapter_argument, load_model_shown, model_help
from glassformer.errors import GlassformerError
from glassformer.io.pretrained import save_pretrained

NAME = "convert"
HELP = ("convert a model (glassformer run, HF folder, .gguf, or a name such as smollm2) into a "
        "Hugging Face folder (config.json + model.safetensors + tokenizer)")


def add_arguments(parser) -> None:
    parser.add_argument("--model", required=True, help=model_help("model to convert"))
    parser.add_argument("--out", default=None,
                        help="folder to write (FILE.gguf: a gemma3, qwen3_next or qwen3_5 model "
                             "in llama.cpp's GGUF names)")
    add_adapter_argument(parser)
    parser.add_argument("--merge", default=None, metavar="OUT",
                        help="with --adapter: the folder to write the merged model to (the same "
                             "as --out)")
    parser.add_argument("--force", action="store_true",
                        help="write into the folder even if it is not empty (its files of the "
                             "same names are replaced)")


def check_out_folder(out: str, force: bool) -> None:
    """One line when `out` is a file, or a folder that is not empty (without --force)."""
    folder = Path(out)
    if folder.exists() and not folder.is_dir():
        raise GlassformerError(f"{folder} is a file; give a folder to write the model to")
    if force or not folder.is_dir():
        return
    shown = sorted(entry.name for entry in islice(folder.iterdir(), 4))
    if shown:
        listed = ", ".join(shown[:3]) + (", ..." if len(shown) > 3 else "")
        raise GlassformerError(f"{folder} is not empty (it holds {listed}); give a new or empty "
                               "folder, or --force to write the model's files into this one")


def run(args) -> int:
    if args.merge is not None and args.adapter is None:
        raise GlassformerError("--merge OUT merges an adapter: give it with --adapter DIR")
    if args.merge is not None and args.out is not None:
        raise GlassformerError("give the folder to write once: --out DIR or --merge OUT")
    out = args.merge if args.merge is not None else args.out
    if out is None:
        raise GlassformerError("give the folder to write: --out DIR (or --adapter DIR "
                               "--merge OUT)")
    if out.endswith(".gguf"):   # llama.cpp's format, for the families io/gguf_hf.py writes
        return _to_gguf(args, out)
    check_out_folder(out, args.force)
    model = load_model_shown(args.model, args.adapter)
    folder = save_pretrained(model, out)
    print(f"wrote {model.arch} model ({model.num_params():,} params) to {folder}", file=sys.stderr)
    return 0


def _to_gguf(args, out: str) -> int:
    """--out FILE.gguf: a Gemma 3, Qwen3-Next or Qwen3.5 model as convert_hf_to_gguf.py writes
    it (float32, no tokenizer; io/gguf_hf.py), ready for `glassformer quantize`."""
    from glassformer.io.gguf_hf import save_gguf

    if Path(out).exists() and not args.force:
        raise GlassformerError(f"{out} exists; give a new file, or --force to replace it")
    model = load_model_shown(args.model, args.adapter)
    save_gguf(model, out)
    print(f"wrote {model.arch} model ({model.num_params():,} params) to {out}", file=sys.stderr)
    return 0
