"""GGUF files of Gemma 3, Qwen3-Next and Qwen3.5 <-> glassformer models, through their HF form.

llama.cpp's convert_hf_to_gguf.py turns a Hugging Face model into GGUF by renaming and reshaping
its tensors and writing its config.json as `{arch}.*` keys. Reading undoes exactly that, then
hands the result to the family's Hugging Face loader, so these GGUF files load through the same
tables, checks and model code as the family's HF folders:

    file.gguf --Meta--> config.json dict --io/hf_config.py--> the family's config
              --Row.load per tensor--> HF tensors --io/hf_names.py--> params --> Model

The per-family knowledge (names, the +1 on norms, A = -exp(A_log), Qwen3.5's value-head order)
is in io/gguf_names/. Checks, in order, each one line naming the field: {arch}.block_count
against the blk.N tensors (io/declared.py), every metadata key the config needs, then every
tensor the config implies (a hybrid's linear layer without blk.N.ssm_a or ssm_conv1d is named
with what it should hold), no tensor left over, every shape, every value finite.

Every tensor is widened to float32 (quantized matrices too: the quantized products of ops/quant/
serve the LLaMA reader, io/gguf.py). `save_gguf` writes a model of these families as
convert_hf_to_gguf.py would (float32 tensors and the metadata; no tokenizer), so `glassformer
quantize` can then shrink it; the tests load such files back at the logits of transformers.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from glassformer.errors import CheckpointError, GlassformerError
from glassformer.io import hf_names
from glassformer.io.declared import check_layer_count
from glassformer.io.finite import check_finite
from glassformer.io.gguf_names import BY_ARCH, BY_GGUF_NAME
from glassformer.io.gguf_names.records import Meta
from glassformer.io.hf_config import config_from_hf, config_to_hf
from glassformer.io.safetensors import write_file_atomically
from glassformer.models.layout import lay_out_for_decoding
from glassformer.models.model import Model
from glassformer.models.registry import arch_of
from glassformer.ops.quant import as_array
from glassformer.tokenizers.bpe_files import gguf_tokenizer

_PREFIX = "model."   # the base-model prefix of these families' HF keys


def family_gguf_model(reader, path: Path, name: str, *, with_tokenizer: bool = True) -> Model:
    """The Model of an open GGUF file whose general.architecture is `name` (BY_GGUF_NAME)."""
    record = BY_GGUF_NAME[name]
    tensors = {tensor.name: tensor for tensor in reader.tensors}
    shapes = {key: tuple(int(d) for d in reversed(t.shape)) for key, t in tensors.items()}
    meta = Meta(reader, path, name)
    blocks = meta.int("block_count", "the number of layers")
    check_layer_count(path, f"{name}.block_count", blocks, tensors, "blk.")
    n_layer = meta.layers()                # the MTP layers after them are skipped
    tensors = {key: t for key, t in tensors.items() if not _mtp(key, n_layer)}
    if "token_embd.weight" not in tensors:
        raise CheckpointError(f"{path} has no tensor token_embd.weight (the token embedding)")
    hf = record.hf_config(meta, shapes)
    try:
        cfg = config_from_hf(hf)
    except (GlassformerError, KeyError, TypeError, ValueError) as err:
        raise CheckpointError(f"{path}: the {name} metadata makes no valid model: {err}") from None
    expected = hf_names.hf_shapes(record.arch, cfg)            # HF key -> shape
    rows = [row for row in record.rows(hf) if all(key in expected for key in row.hf)]
    _check_names(path, name, meta, rows, tensors, expected, hf)
    out = {}
    for row in rows:
        arrays = [_widened(tensors[key], path) for key in row.gguf]
        try:
            loaded = row.load(hf, *arrays)
        except ValueError:          # a reshape that does not fit: the stored shape is wrong
            loaded = [np.empty(0)]
        for key, array in zip(row.hf, loaded):
            if array.shape != expected[key]:
                stored = ", ".join(f"{g} {shapes[g]}" for g in row.gguf)
                raise CheckpointError(f"{path}: tensor {stored} does not make {key} "
                                      f"{expected[key]} ({row.need})")
            check_finite(path, f"{' + '.join(row.gguf)} (as {key}: {row.need})", array)
            out[key] = array
    params = hf_names.to_glassformer(record.arch, cfg, out)
    del out
    lay_out_for_decoding(params)   # in place: packed, row-major (models/layout.py)
    tokenizer = None
    if with_tokenizer and "tokenizer.ggml.model" in reader.fields:
        tokenizer = gguf_tokenizer(reader, path)
    return Model(cfg, params, tokenizer=tokenizer)


def _mtp(key: str, n_layer: int) -> bool:
    """A tensor of a multi-token-prediction layer (blk.N with N >= the decoder's layers)."""
    parts = key.split(".")
    return parts[0] == "blk" and parts[1].isdigit() and int(parts[1]) >= n_layer


def _check_names(path, name, meta, rows, tensors, expected, hf) -> None:
    """Every tensor the config implies is in the file, and nothing else is."""
    wanted = {}
    for row in rows:
        for key in row.gguf:
            wanted[key] = row
    for key, row in wanted.items():
        if key not in tensors:
            shapes = row.save(hf, *(np.zeros(expected[k], np.float32) for k in row.hf))
            shape = tuple(shapes[row.gguf.index(key)].shape)
            raise CheckpointError(f"{path} has no tensor {key}: expected {row.need}, shape "
                                  f"{shape}{_why(meta, key)}")
    unexpected = sorted(set(tensors) - set(wanted))
    if unexpected:
        raise CheckpointError(f"{path}: tensors {unexpected[:5]} are not part of a {name} model "
                              f"with this metadata ({len(unexpected)} unexpected)")


def _why(meta, key: str) -> str:
    """Why a layer needs a Gated DeltaNet tensor: llama.cpp's layer pattern."""
    if key.split(".")[2].startswith("ssm_") or ".attn_qkv." in key or ".attn_gate." in key:
        every = meta.get("full_attention_interval", "", default=4)
        return (f" (layer {key.split('.')[1]} is a linear-attention layer by "
                f"{meta.arch}.full_attention_interval={every})")
    return ""


def _widened(tensor, path: Path) -> np.ndarray:
    """One GGUF tensor, any type the gguf package reads, as a float32 array in NumPy order."""
    from gguf.quants import dequantize  # imported here: only GGUF files need it

    try:
        values = dequantize(tensor.data, tensor.tensor_type)
    except NotImplementedError:
        raise CheckpointError(f"{path}: tensor {tensor.name} uses {tensor.tensor_type.name}, "
                              "which gguf cannot dequantise") from None
    values = values.reshape(tuple(int(d) for d in reversed(tensor.shape)))
    check_finite(path, tensor.name, values)
    return np.array(values, dtype=np.float32)        # a fresh copy: the map is read-only


def save_gguf(model: Model, out) -> Path:
    """Write `model` (Gemma 3, Qwen3-Next or Qwen3.5) to `out` as llama.cpp names and lays out
    its tensors (float32), with the {arch}.* metadata; no tokenizer. Returns the path."""
    from gguf import GGUFWriter  # imported here: only GGUF files need it

    out = Path(out)
    if out.suffix != ".gguf":
        raise GlassformerError(f"a GGUF file is named FILE.gguf, got {out}")
    arch = arch_of(model.cfg)
    if arch not in BY_ARCH:
        raise GlassformerError(f"save_gguf writes {', '.join(BY_ARCH)} models; this one is "
                               f"{arch}")
    record = BY_ARCH[arch]
    hf = config_to_hf(model.cfg)
    params = {key: np.asarray(as_array(value), dtype=np.float32)
              for key, value in model.params.items()}
    theirs = {key.removeprefix(_PREFIX): array
              for key, array in hf_names.to_hf(arch, model.cfg, params).items()}
    tensors = []
    for row in record.rows(hf):
        if all(key in theirs for key in row.hf):
            arrays = row.save(hf, *(theirs[key] for key in row.hf))
            tensors += [(key, np.ascontiguousarray(a, dtype=np.float32))
                        for key, a in zip(row.gguf, arrays)]
    keys = record.metadata(hf)

    def write(tmp: Path) -> None:
        writer = GGUFWriter(str(tmp), record.name)
        writer.add_name(f"glassformer {record.name}")
        for key, value in keys.items():
            _add(writer, f"{record.name}.{key}", value)
        for key, array in tensors:
            writer.add_tensor(key, array)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
        writer.close()

    write_file_atomically(out, write)
    return out


def _add(writer, key: str, value) -> None:
    """One metadata value with llama.cpp's types: counts uint32, sizes float32, flags bool."""
    from gguf import GGUFValueType

    if isinstance(value, list):
        kind = GGUFValueType.BOOL if value and isinstance(value[0], bool) else GGUFValueType.INT32
        writer.add_key_value(key, value, GGUFValueType.ARRAY, sub_type=kind)
    elif isinstance(value, bool):
        writer.add_key_value(key, value, GGUFValueType.BOOL)
    elif isinstance(value, int):
        writer.add_key_value(key, value, GGUFValueType.UINT32)
    elif isinstance(value, float):
        writer.add_key_value(key, value, GGUFValueType.FLOAT32)
    else:
        writer.add_key_value(key, str(value), GGUFValueType.STRING)
