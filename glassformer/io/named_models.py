"""`load_model(name_or_path)`: a Model from a path or from a short name such as smollm2.

The names and the packages that ship their files are in glassformer/packaged.py; this file only
turns a name into its installed path and hands it to load_pretrained.
"""
from __future__ import annotations

from pathlib import Path

from glassformer.io.pretrained import load_pretrained
from glassformer.models.model import Model
from glassformer.packaged import MODEL, resolve_path


def load_model(name_or_path: str | Path, *, adapter: str | Path | None = None,
               dequantize: bool = False, activations: str = "float32") -> Model:
    """A `Model` from a packaged name (see packaged.py) or a path that load_pretrained takes: a
    .gguf file, an HF folder or a glassformer run/checkpoint folder; with `adapter`, a LoRA
    adapter folder (PEFT's format) merged into it (io/peft.py); `dequantize`: a GGUF's quantized
    matrices widened to float32 (load_pretrained); `activations`: "q8" to round the inputs of
    quantized matrices to 8 bits as llama.cpp does (load_pretrained)."""
    return load_pretrained(resolve_path(name_or_path, MODEL), adapter=adapter,
                           dequantize=dequantize, activations=activations)
