"""`load_pretrained(path)` and `save_pretrained(model, dir)`: Hugging Face folders and our own runs.

A Hugging Face folder holds config.json and model.safetensors, or the shards listed by
model.safetensors.index.json. config.json's `model_type` picks the family (gpt2; llama, qwen2 or
mistral; bert; marian, bart or mbart: io/hf/), and io/hf_config.py turns it into its config.

A glassformer folder is a run folder or checkpoint written by `glassformer train` (config.json has
an "arch" key; see io/checkpoint.py), or config.json with "arch" beside model.safetensors.

Loading is checked before any math: each safetensors header is parsed and validated (a truncated
file fails there), then the tensor names are compared with the ones the config implies, both
ways, and every shape is compared; only then are the tensors read and renamed (io/hf_names.py).
A .gguf file is read by io/gguf.py.
Only JSON and safetensors are read. A pickle (pytorch_model.bin, *.pt, ...) is refused with the
command that converts it, and no code from the folder is ever run (no trust_remote_code).
Every problem is one CheckpointError line naming the file and, where it applies, the tensor.
Before anything is built per layer, the declared layer counts are compared with the layers the
tensors hold (io/declared.py); every tensor read must be finite (io/finite.py).
"""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np

from glassformer.errors import CheckpointError, GlassformerError, check_choice
from glassformer.io import hf_names
from glassformer.io.finite import check_finite
from glassformer.io.declared import check_hf_layer_counts, check_our_layer_counts
from glassformer.io.checkpoint import LATEST, MANIFEST, load_checkpoint
from glassformer.io.gguf import load_gguf
from glassformer.io.hf.registry import hf_family, model_type
from glassformer.io.hf_config import config_from_hf, config_to_hf
from glassformer.json_object import read_json_object
from glassformer.io.peft import load_adapter, merge_adapters, not_a_model
from glassformer.io.safetensors import load_safetensors, read_safetensors_header, save_safetensors
from glassformer.models.layout import lay_out_for_decoding
from glassformer.models.model import Model
from glassformer.models.registry import arch_of, config_from_dict, family
from glassformer.ops.quant import is_quantized
from glassformer.ops.quant.matrix import with_activations
from glassformer.ops.position import fixed_position_table
from glassformer.packaged import MODEL, packaged_names, packaged_path
from glassformer.tokenizers.load import load_tokenizer
from glassformer.tokenizers.tokenizer_config import read_tokenizer_config

# A stored sinusoidal table against ours: float32 rounding of angles up to ~1e3 radians.
POSITION_ATOL = 1e-4
WEIGHTS = "model.safetensors"
INDEX = "model.safetensors.index.json"
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle")
TOKENIZER_FILES = ("tokenizer.json", "vocab.json", "encoder.json", "vocab.txt")
RUN_TOKENIZER = "tokenizer"   # the folder of a run where `train` saves the tokenizer's files
FLOAT_DTYPES = ("F64", "F32", "F16", "BF16")
CONVERT_HINT = ("convert it once, in an environment you trust, with transformers: "
                "AutoModel.from_pretrained(dir).save_pretrained(dir, safe_serialization=True) "
                "(or load the state dict with PyTorch, weights_only=True, and write it with "
                "safetensors.torch.save_file)")


def load_pretrained(path, *, tokenizer: bool = True, adapter=None,
                    dequantize: bool = False, activations: str = "float32") -> Model:
    """A Model from a Hugging Face folder, a glassformer run/checkpoint folder, a .gguf file, or
    a name the CLI takes (smollm2, minilm: glassformer/packaged.py).

    tokenizer: also load the folder's tokenizer, when it has one (model.tokenizer, else None).
    adapter: a LoRA adapter folder in PEFT's format (io/peft.py), checked against the model and
    merged into its weights (W + s A B), so the Model runs at the base model's speed.
    dequantize: widen a GGUF file's quantized matrices to float32; by default they stay in their
    blocks (io/gguf.py, ops/quant/), about the file's size in memory.
    activations: "q8" rounds the inputs of those kept-quantized matrices to 8-bit blocks before
    the product, as llama.cpp does (ops/quant/activations_q8.py); "float32" (default) does not.
    """
    if activations != "float32" and dequantize:
        raise GlassformerError(f"activation quantization {activations!r} needs weights kept "
                               f"quantized; it cannot be combined with dequantize "
                               f"(--dequantize)")
    model = _load_model(path, tokenizer, dequantize)
    if activations != "float32":
        model.params = with_activations(model.params, activations)
    if adapter is None:
        return model
    adapters, _ = load_adapter(adapter, model)
    return merge_adapters(model, adapters)


def _load_model(path, tokenizer: bool, dequantize: bool = False) -> Model:
    """load_pretrained without an adapter."""
    folder = Path(path)
    if not folder.exists() and str(path) in packaged_names(MODEL):
        folder = packaged_path(str(path), MODEL)
    if folder.is_file() and folder.suffix == ".gguf":  # llama.cpp's format: io/gguf.py
        return load_gguf(folder, with_tokenizer=tokenizer, dequantize=dequantize)
    if folder.is_file():
        if folder.suffix in PICKLE_SUFFIXES:
            raise CheckpointError(f"{folder} is a pickle file, which glassformer never loads "
                                  f"(unpickling can run arbitrary code); {CONVERT_HINT}")
        raise CheckpointError(f"{folder} is a file; load_pretrained takes a model folder "
                              "(config.json + model.safetensors) or a glassformer run folder")
    if not folder.is_dir():
        raise CheckpointError(f"model folder {folder} does not exist")
    if not_a_model(folder):
        raise CheckpointError(not_a_model(folder))
    if (folder / LATEST).is_file() or (folder / MANIFEST).is_file():
        return _load_glassformer_run(folder, tokenizer)
    config = _read_config(folder)
    if "arch" in config and "model_type" not in config:
        return _load_glassformer_folder(folder, config, tokenizer)
    try:
        arch = model_type(config.get("model_type")).arch
    except GlassformerError as err:
        raise CheckpointError(f"{folder / 'config.json'}: {err}") from None
    headers = _read_headers(folder)
    table = hf_names.hf_keys_by_table_name(arch, headers)
    # before the config: a layer count the weights do not hold would size per-layer tables
    check_hf_layer_counts(folder, config, hf_names.family_names(arch), table)
    cfg = _config_from_hf(folder, arch, config, table)
    _check_fixed_positions(folder, arch, cfg, headers, table)
    _check_tensors(folder, arch, cfg, headers, table)
    tensors = _read_tensors(folder, headers, table)
    _check_tied_copies(folder, arch, cfg, tensors)
    params = hf_names.to_glassformer(arch, cfg, tensors)
    del tensors                    # the params hold what they need: the layout can free the rest
    lay_out_for_decoding(params)   # in place: packed, row-major (models/layout.py)
    return Model(cfg, params, _tokenizer(folder) if tokenizer else None)


def save_pretrained(model: Model, directory) -> Path:
    """Write config.json + model.safetensors that transformers' from_pretrained loads as the same
    model (GPT2LMHeadModel, LlamaForCausalLM, Qwen2ForCausalLM, BertForMaskedLM or BertModel,
    MarianMTModel, BartForConditionalGeneration or MBartForConditionalGeneration,
    Qwen3ForCausalLM, Qwen3MoeForCausalLM, OlmoeForCausalLM or MixtralForCausalLM: io/hf/), plus
    the tokenizer if any (a BERT's as BertTokenizerFast reads it: io/hf/bert.py)."""
    hf = hf_family(model.arch)   # io/hf/<family>.py
    hf_config = config_to_hf(model.cfg)
    # What HF's class always has (GPT-2's biases, Marian's final_logits_bias) is written as
    # zeros where the model has none: the same model.
    cfg = replace(model.cfg, **hf.hf_always)
    params = {name: model.params.get(name, np.zeros(shape, np.float32))
              for name, shape in family(model.arch).param_shapes(cfg).items()}
    # an HF folder holds float tensors: a quantized weight (ops/quant/) is widened as it is written
    params = {name: value.dequantize() if is_quantized(value) else value
              for name, value in params.items()}
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    tensors = hf_names.to_hf(model.arch, cfg, params)
    save_safetensors(folder / WEIGHTS, tensors, metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps(hf_config, indent=2) + "\n", encoding="utf-8")
    if model.tokenizer is not None:
        hf.save_tokenizer(model.tokenizer, folder, model.cfg)
    return folder


# ---------------------------------------------------------------- Hugging Face folders

def _read_config(folder: Path) -> dict:
    path = folder / "config.json"
    if not path.is_file():
        raise CheckpointError(f"{folder} has no config.json; a model folder needs config.json "
                              f"and {WEIGHTS} (or {INDEX})")
    return read_json_object(path, CheckpointError)


def _weight_files(folder: Path) -> list[str]:
    """The safetensors file names holding the weights; refuses pickles with a conversion hint."""
    if (folder / WEIGHTS).is_file():
        return [WEIGHTS]
    if (folder / INDEX).is_file():
        return sorted(set(_read_index(folder).values()))
    pickles = sorted(p.name for p in folder.iterdir() if p.suffix in PICKLE_SUFFIXES)
    if pickles:
        raise CheckpointError(f"{folder} holds {pickles[0]}, a pickle file, and no safetensors; "
                              f"glassformer never unpickles (it can run arbitrary code); "
                              f"{CONVERT_HINT}")
    raise CheckpointError(f"{folder} has no weights: expected {WEIGHTS} or {INDEX}")


def _read_index(folder: Path) -> dict[str, str]:
    """model.safetensors.index.json -> {tensor name: shard file name}."""
    path = folder / INDEX
    try:
        index = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError) as err:
        raise CheckpointError(f"{path} is not valid JSON: {err}") from None
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not weight_map:
        raise CheckpointError(f"{path} has no 'weight_map' object naming each tensor's shard")
    for name, shard in weight_map.items():
        if not isinstance(shard, str) or Path(shard).name != shard:
            raise CheckpointError(f"{path}: tensor {name!r} names shard {shard!r}; expected a "
                                  "file name in the same folder")
    return weight_map


def _read_headers(folder: Path) -> dict[str, tuple]:
    """{file key: (TensorInfo, file name)} across all weight files, headers only (no data)."""
    files = _weight_files(folder)
    index = _read_index(folder) if files != [WEIGHTS] else None
    headers = {}
    for file in files:
        for key, info in read_safetensors_header(folder / file).tensors.items():
            if key in headers:
                raise CheckpointError(f"{folder}: tensor {key!r} is in both {headers[key][1]} "
                                      f"and {file}")
            if index is not None and index.get(key) != file:
                raise CheckpointError(f"{folder / file} holds tensor {key!r}, which {INDEX} "
                                      f"places in {index.get(key)!r}")
            headers[key] = (info, file)
    for key, file in (index or {}).items():
        if key not in headers:
            raise CheckpointError(f"{INDEX} lists tensor {key!r} in {file}, but {folder / file} "
                                  "does not hold it")
    return headers


def _config_from_hf(folder: Path, arch: str, config: dict, table: dict):
    """The family config from config.json and the fields its tensors decide (a BERT's MLM head;
    an encoder-decoder's final_logits_bias, which a bare BartModel file lacks: zeros, so none)."""
    seen = {field: any(name.startswith(start) for name in table)
            for field, start in hf_family(arch).from_tensors.items()}
    try:
        return config_from_hf(config, **seen)
    except KeyError as err:
        raise CheckpointError(f"{folder / 'config.json'} lacks the key {err.args[0]!r}") from None
    except (GlassformerError, TypeError) as err:
        raise CheckpointError(f"{folder / 'config.json'}: {err}") from None


def _check_tensors(folder: Path, arch: str, cfg, headers: dict, table: dict) -> None:
    """Names both ways, then shapes and dtypes, against what the config implies."""
    expected = hf_names.hf_shapes(arch, cfg)
    copies = _tied_copies(arch, expected)
    for name, shape in expected.items():
        if name not in table:
            raise CheckpointError(f"{folder}: missing tensor {name!r} (expected shape {shape}) "
                                  f"for this {arch} config.json")
    for name, key in table.items():
        info, file = headers[key]
        if name in expected:
            want = expected[name]
        elif name in copies:
            want = expected[copies[name]]  # a tied head has its source's shape
        else:
            raise CheckpointError(f"{folder / file}: unexpected tensor {key!r} of shape "
                                  f"{info.shape}; a {arch} model with this config.json has none")
        if info.shape != want:
            raise CheckpointError(f"{folder / file}: tensor {key!r} has shape {info.shape}, but "
                                  f"config.json implies {want}")
        check_choice(f"{folder / file}: tensor {key!r} dtype", info.dtype, FLOAT_DTYPES,
                     CheckpointError)


def _check_fixed_positions(folder: Path, arch: str, cfg, headers: dict, table: dict) -> None:
    """Older Marian files store their fixed sinusoidal tables as embed_positions tensors: each
    must equal glassformer's [sin | cos] table (to float32 rounding), and is then dropped."""
    names = hf_family(arch).fixed_positions
    if not names or cfg.positions != "sinusoidal":
        return
    for name in names:
        if name not in table:
            continue
        key = table.pop(name)
        info, file = headers[key]
        stored = load_safetensors(folder / file, {key: name})[key]
        rows = min(stored.shape[0], cfg.max_seq_len)
        expected = fixed_position_table(rows, cfg.d_model)
        if stored.shape[1:] != (cfg.d_model,) or not np.allclose(stored[:rows], expected,
                                                                 atol=POSITION_ATOL):
            raise CheckpointError(f"{folder / file}: {key!r} is not the sinusoidal [sin | cos] "
                                  "table this Marian config.json implies")


def _read_tensors(folder: Path, headers: dict, table: dict) -> dict[str, np.ndarray]:
    """{table name: array} for every kept tensor, read file by file."""
    wanted_by_file: dict[str, dict[str, str]] = {}
    for name, key in table.items():
        wanted_by_file.setdefault(headers[key][1], {})[key] = name
    tensors = {}
    for file, wanted in wanted_by_file.items():
        arrays = load_safetensors(folder / file, wanted)  # ignored buffers are never read
        for key, name in wanted.items():
            check_finite(folder / file, key, arrays[key])
            tensors[name] = arrays[key]
    return tensors


def _tied_copies(arch: str, expected: dict) -> dict[str, str]:
    """{tied HF key: its source} for heads this config ties (so the file may repeat them)."""
    return {name: source for name, source in hf_names.family_names(arch).tied.items()
            if name not in expected and source in expected}


def _check_tied_copies(folder: Path, arch: str, cfg, tensors: dict) -> None:
    """A tied head stored anyway must equal what it is tied to; it is then dropped."""
    for name, source in _tied_copies(arch, hf_names.hf_shapes(arch, cfg)).items():
        if name in tensors:
            if not np.array_equal(tensors[name], tensors[source]):
                raise CheckpointError(f"{folder}: {name!r} should be a copy of {source!r} (the "
                                      "config ties them) but the two tensors differ")
            del tensors[name]


def _tokenizer(folder: Path):
    """The folder's tokenizer, or None when it has none (or only Marian's SentencePiece pair,
    source.spm + target.spm, which glassformer does not read: such a model takes ids)."""
    if not any((folder / name).is_file() for name in TOKENIZER_FILES):
        return None
    if (folder / "source.spm").is_file() and not (folder / "tokenizer.json").is_file():
        return None
    return load_tokenizer(folder)


# ---------------------------------------------------------------- glassformer folders

def _load_glassformer_run(folder: Path, tokenizer: bool) -> Model:
    ckpt = load_checkpoint(folder)
    check_our_layer_counts(ckpt.path, ckpt.config, ckpt.params)
    cfg = _our_config(ckpt.path / "config.json", ckpt.config)
    _check_our_params(ckpt.path / WEIGHTS, cfg, ckpt.params)
    for name, value in ckpt.params.items():
        check_finite(ckpt.path / WEIGHTS, name, value)
    tok = _tokenizer(ckpt.path) if tokenizer else None
    if tok is not None and tok.config.is_empty():
        # A checkpoint stores tokenizer.json only; the run keeps the tokenizer's other files (chat
        # template, named tokens: train --init from a chat model) once, in run/tokenizer/.
        tok.config = read_tokenizer_config(ckpt.path.parent / RUN_TOKENIZER)
    params = {k: np.asarray(v, dtype=np.float32) for k, v in ckpt.params.items()}
    del ckpt
    lay_out_for_decoding(params)   # in place (models/layout.py)
    return Model(cfg, params, tok)


def _load_glassformer_folder(folder: Path, config: dict, tokenizer: bool) -> Model:
    if not (folder / WEIGHTS).is_file():
        _weight_files(folder)  # raises: pickle or no weights
    header = read_safetensors_header(folder / WEIGHTS)
    check_our_layer_counts(folder, config, header.tensors)
    cfg = _our_config(folder / "config.json", config)
    shapes = {key: info.shape for key, info in header.tensors.items()}
    _check_our_params(folder / WEIGHTS, cfg, shapes)
    params = {k: np.asarray(v, dtype=np.float32)
              for k, v in load_safetensors(folder / WEIGHTS).items()}
    for name, value in params.items():
        check_finite(folder / WEIGHTS, name, value)
    lay_out_for_decoding(params)   # in place (models/layout.py)
    return Model(cfg, params, _tokenizer(folder) if tokenizer else None)


def _our_config(path: Path, config: dict):
    try:
        return config_from_dict(config)
    except (GlassformerError, TypeError) as err:
        raise CheckpointError(f"{path}: {err}") from None


def _check_our_params(path: Path, cfg, params: dict) -> None:
    """params (arrays or shapes) against the config's names and shapes, both ways."""
    arch = arch_of(cfg)
    expected = family(arch).param_shapes(cfg)
    for name, shape in expected.items():
        if name not in params:
            raise CheckpointError(f"{path}: missing tensor {name!r} (expected shape {shape})")
    for name, value in params.items():
        shape = tuple(getattr(value, "shape", value))
        if name not in expected:
            raise CheckpointError(f"{path}: unexpected tensor {name!r} of shape {shape}; a "
                                  f"{arch} model with this config has none")
        if shape != expected[name]:
            raise CheckpointError(f"{path}: tensor {name!r} has shape {shape}, but the config "
                                  f"implies {expected[name]}")
