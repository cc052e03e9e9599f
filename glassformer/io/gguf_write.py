"""Write a GGUF file whose matrices are quantized by ops/quant/: `glassformer quantize`.

    source GGUF --read--> every tensor as float32, in GGUF's own layout (rows as stored)
                --quantize--> each matrix's rows in blocks of the chosen format (ops/quant/)
                --gguf.GGUFWriter--> FILE.gguf: the source's metadata and tokenizer, copied

The rows are quantized as the file stores them (nn.Linear's (out, in), q and k rows in llama.cpp's
pair order), so nothing is permuted or transposed: the new file reads as the old one does, in
llama.cpp and in glassformer (io/gguf.py). As `llama-quantize` does, 1-D tensors (the norms) stay
float32, and a matrix whose rows are not a multiple of the format's block falls back to another
format: for Q4_K (blocks of 256) that is Q5_0, as in llama.cpp. `general.file_type` is set to the
format's llama.cpp file type (Q4_K_S for q4_k).

A GGUF source, or an HF folder of Gemma 3, Qwen3-Next or Qwen3.5, which is first written as a
float32 GGUF by io/gguf_hf.py (as convert_hf_to_gguf.py would, without a tokenizer). Other
folders and glassformer runs would need the metadata and tokenizer llama.cpp's
convert_hf_to_gguf.py writes, which is not written here (one line refuses).
The file is written beside its destination and renamed when complete (io/safetensors.py).
"""
from __future__ import annotations

import json
import secrets
from pathlib import Path

import numpy as np

from glassformer.errors import CheckpointError, GlassformerError
from glassformer.io.gguf import FLOAT_TYPES, open_gguf
from glassformer.io.gguf_hf import save_gguf
from glassformer.io.gguf_names import BY_ARCH
from glassformer.io.pretrained import load_pretrained
from glassformer.io.safetensors import write_file_atomically
from glassformer.ops.quant import TYPE_IDS, format_of

FALLBACK = {"q4_k": "q5_0"}            # a format whose block does not divide a row -> this one
FILE_TYPES = {"q8_0": 7, "q4_0": 2, "q4_1": 3, "q4_k": 14, "q5_0": 8}   # llama.cpp's LlamaFileType
SKIPPED_KEYS = ("GGUF.", "general.architecture", "general.file_type")   # the writer's own


def quantize_gguf(source: str | Path, kind: str, out: str | Path) -> dict[str, int]:
    """Write `out`, the GGUF file `source` with its matrices in format `kind` (q8_0, q4_0, q4_1,
    q4_k). Returns how many tensors went to each type ({"Q4_K": 30, "Q4_1": 181, "F32": 61})."""
    from gguf import GGMLQuantizationType, GGUFWriter  # imported here: only GGUF files need it

    format_of(kind)                                     # an unknown format: one line
    kind = kind.lower()
    source, out = Path(source), Path(out)
    if out.suffix != ".gguf":
        raise GlassformerError(f"--out names the GGUF file to write (FILE.gguf), got {out}")
    if source.suffix != ".gguf" and _written_here(source):
        return _quantize_folder(source, kind, out)
    if source.suffix != ".gguf":
        raise GlassformerError(f"quantize reads a .gguf file for now, got {source}; convert a "
                               "Hugging Face folder with llama.cpp's convert_hf_to_gguf.py first")
    reader = open_gguf(source)
    architecture = reader.fields["general.architecture"].contents()
    counts: dict[str, int] = {}
    tensors = []
    for tensor in reader.tensors:                       # all converted before the file is opened
        data, qtype = _requantized(tensor, kind, source)
        name = qtype.lower() if qtype in TYPE_IDS else qtype
        tensors.append((tensor.name, data, GGMLQuantizationType[qtype.upper()]))
        counts[name.upper()] = counts.get(name.upper(), 0) + 1

    def write(tmp: Path) -> None:
        writer = GGUFWriter(str(tmp), architecture)
        _copy_metadata(reader, writer)
        writer.add_file_type(FILE_TYPES[kind])
        for name, data, qtype in tensors:
            writer.add_tensor(name, data, raw_dtype=qtype)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()

    write_file_atomically(out, write)
    return counts


def _written_here(source: Path) -> bool:
    """Whether `source` is an HF folder of a family io/gguf_hf.py writes as GGUF (Gemma 3,
    Qwen3-Next, Qwen3.5), by its config.json's model_type."""
    try:
        config = json.loads((source / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and config.get("model_type") in {
        record.model_type for record in BY_ARCH.values()}


def _quantize_folder(source: Path, kind: str, out: Path) -> dict[str, int]:
    """An HF folder of those families: written as a float32 GGUF beside `out` (io/gguf_hf.py),
    quantized from there, the float32 file removed."""
    model = load_pretrained(source, tokenizer=False)
    full = out.with_name(f".{out.stem}.f32-{secrets.token_hex(4)}.gguf")
    try:
        save_gguf(model, full)
        return quantize_gguf(full, kind, out)
    finally:
        full.unlink(missing_ok=True)


def _requantized(tensor, kind: str, path: Path) -> tuple[np.ndarray, str]:
    """(the data to write, its type name): a matrix's blocks in `kind` (or its fallback), any
    other tensor as float32. The values are read as float32 first (gguf dequantizes any type)."""
    from gguf.quants import dequantize

    shape = tuple(int(d) for d in reversed(tensor.shape))          # NumPy order: (rows, cols)
    try:
        values = dequantize(tensor.data, tensor.tensor_type).reshape(shape).astype(np.float32)
    except NotImplementedError:
        raise CheckpointError(f"{path}: tensor {tensor.name} uses {tensor.tensor_type.name}, "
                              "which gguf cannot dequantise") from None
    if len(shape) != 2:
        return values, "F32"                           # norms: float32, as llama-quantize keeps
    target = kind if shape[1] % format_of(kind).BLOCK == 0 else FALLBACK.get(kind, kind)
    fmt = format_of(target)
    if shape[1] % fmt.BLOCK:
        return values, "F32"
    blocks = fmt.quantize(values.reshape(-1, fmt.BLOCK))            # (rows * cols / B, BYTES)
    return blocks.reshape(shape[0], -1), target.upper()


def _copy_metadata(reader, writer) -> None:
    """Every key-value pair of the source (hyperparameters, tokenizer, chat template) but the
    writer's own (the header counts, the architecture it was opened with, the file type)."""
    from gguf import GGUFValueType

    for key, field in reader.fields.items():
        if key.startswith(SKIPPED_KEYS):
            continue
        vtype = GGUFValueType(field.types[0])
        sub_type = GGUFValueType(field.types[-1]) if vtype == GGUFValueType.ARRAY else None
        writer.add_key_value(key, field.contents(), vtype, sub_type=sub_type)
