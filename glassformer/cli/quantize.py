"""`glassformer quantize --model M --type q8_0|q4_0|q4_1|q4_k --out FILE.gguf`: a GGUF file whose
matrices are in one of ops/quant/'s block formats, llama.cpp's metadata and tokenizer copied from
the source (io/gguf_write.py). The source is a .gguf file, a packaged name (smollm2), or an HF
folder of Gemma 3, Qwen3-Next or Qwen3.5 (written as GGUF first, io/gguf_hf.py; no tokenizer);
another folder or a glassformer run is refused in one line for now. Nothing is written on a
refusal, and the file appears only when complete."""
from __future__ import annotations

import sys

from glassformer.cli.common import model_help
from glassformer.io.gguf_write import quantize_gguf
from glassformer.ops.quant import FORMATS
from glassformer.packaged import MODEL, resolve_path

NAME = "quantize"
HELP = ("write a GGUF file with its weights quantized to Q8_0, Q4_0, Q4_1 or Q4_K (blocks "
        "llama.cpp reads; glassformer explain quant shows them)")


def add_arguments(parser) -> None:
    parser.add_argument("--model", required=True,
                        help=model_help("GGUF model to quantize (a .gguf file, smollm2, or an "
                                        "HF folder of gemma3 / qwen3_next / qwen3_5)"))
    parser.add_argument("--type", required=True, choices=sorted(FORMATS), dest="kind",
                        help="the block format of the matrices (norms stay float32; Q4_K falls "
                             "back to Q4_1 for rows not a multiple of 256)")
    parser.add_argument("--out", required=True, help="the GGUF file to write (FILE.gguf)")


def run(args) -> int:
    counts = quantize_gguf(resolve_path(args.model, MODEL), args.kind, args.out)
    listed = ", ".join(f"{n} {name}" for name, n in sorted(counts.items()))
    print(f"wrote {args.out} ({listed} tensors)", file=sys.stderr)
    return 0
