"""Load a llama-architecture GGUF file (llama.cpp's format) into a glassformer LLaMA model.

A GGUF file holds metadata (key -> value: the architecture's hyperparameters under `llama.*`, the
tokenizer under `tokenizer.*`) and tensors, many of them quantised (Q4_1: blocks of 32 weights
sharing a float16 scale and minimum). The `gguf` package parses the file. By default a matrix
stored in a format of ops/quant/ (Q8_0, Q4_0, Q4_1, Q4_K) stays in its blocks, a QuantizedMatrix
that the products read directly: the linear weights, the LM head and the token embedding (its
rows dequantized on lookup), so the model's memory is about the file's size. Other tensors (norms,
float16) are widened to float32. `dequantize=True` widens everything to float32
(`gguf.quants.dequantize`, any type gguf reads), the behaviour before quantized weights.
Files of Gemma 3, Qwen3-Next and Qwen3.5 (general.architecture gemma3, qwen3next, qwen35) go to
io/gguf_hf.py, through the family's HF form; gpt-oss files are refused (MXFP4 experts).

Three layout facts to undo, each on one line in `_convert`:

1. Dims. GGUF lists a tensor's dims fastest-first (ggml's ne0, ne1), the reverse of NumPy's
   shape. The `gguf` reader already hands back arrays in NumPy order, which is PyTorch's
   nn.Linear layout (out, in); glassformer stores weights (in, out), so matrices are transposed.
   The embedding stays (V, C).
2. RoPE rows. llama.cpp rotates adjacent pairs (x0, x1), (x2, x3), ... (the "interleaved"
   layout); HF LLaMA, and glassformer, rotate the two halves (x_i, x_{i + D/2}). So that one
   rotation code serves both, convert_hf_to_gguf.py permutes the rows of every head of W_q and
   W_k from half layout to pair layout:

       HF rows of one head:   0 1 2 3 | 4 5 6 7        (halves: i pairs with i + D/2)
       GGUF rows:             0 4 1 5 2 6 3 7          (pairs: 2j pairs with 2j + 1)

   i.e. reshape (heads, 2, D/2) -> swap the last two axes. We invert it: reshape
   (heads, D/2, 2) -> swap back. transformers' own GGUF loader does the same
   (`_reverse_permute_weights` in modeling_gguf_pytorch_utils.py); the parity test checks logits.
3. Tied head. `output.weight` is absent when the LM head reuses `token_embd.weight`.

Tensor names (GGUF -> glassformer), with N the layer:

    token_embd            tok_emb (V, C)              output_norm        norm_f.w
    output                lm_head (C, V)              blk.N.attn_norm    blocks.N.norm1.w
    blk.N.attn_q / _k     blocks.N.attn.wq / .wk      blk.N.ffn_norm     blocks.N.norm2.w
    blk.N.attn_v          blocks.N.attn.wv            blk.N.ffn_gate     blocks.N.mlp.w_gate
    blk.N.attn_output     blocks.N.attn.wo            blk.N.ffn_up/down  blocks.N.mlp.w_up/w_down

Only GGUF is read here: no pickle, no code from the file. llama.block_count is compared with
the blk.N tensors the file holds before the tensor table is built (io/declared.py), and every
dequantised tensor must be finite (io/finite.py).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from glassformer.errors import CheckpointError, GlassformerError
from glassformer.io.declared import check_layer_count
from glassformer.io.finite import check_finite
from glassformer.io.gguf_hf import family_gguf_model
from glassformer.io.gguf_names import BY_GGUF_NAME
from glassformer.io.mapped import release_pages
from glassformer.models.layout import lay_out_for_decoding
from glassformer.models.llama import LlamaConfig
from glassformer.models.model import Model
from glassformer.models.registry import family
from glassformer.ops.quant import FORMATS, QuantizedMatrix, is_quantized
from glassformer.ops.quant.formats import scales_finite
from glassformer.tokenizers.gguf_check import check_gguf
from glassformer.tokenizers.gguf_reader import open_reader
from glassformer.tokenizers.bpe_files import gguf_tokenizer_parts, tokenizer_from_parts

# GGUF tensor suffix -> (glassformer suffix, transpose to (in, out)?, RoPE-permuted heads)
LAYER_TENSORS = {
    "attn_norm.weight": ("norm1.w", False, None),
    "attn_q.weight": ("attn.wq", True, "n_head"),
    "attn_k.weight": ("attn.wk", True, "n_kv_head"),
    "attn_v.weight": ("attn.wv", True, None),
    "attn_output.weight": ("attn.wo", True, None),
    "ffn_norm.weight": ("norm2.w", False, None),
    "ffn_gate.weight": ("mlp.w_gate", True, None),
    "ffn_up.weight": ("mlp.w_up", True, None),
    "ffn_down.weight": ("mlp.w_down", True, None),
}
TOP_TENSORS = {
    "token_embd.weight": ("tok_emb", False, None),
    "output_norm.weight": ("norm_f.w", False, None),
    "output.weight": ("lm_head", True, None),
}
# llama.* metadata key -> LlamaConfig field (all required except where noted in _config_fields)
LLAMA_KEYS = {
    "block_count": "n_layer",
    "embedding_length": "d_model",
    "feed_forward_length": "d_ff",
    "attention.head_count": "n_head",
    "attention.head_count_kv": "n_kv_head",
    "rope.freq_base": "rope_theta",
    "attention.layer_norm_rms_epsilon": "norm_eps",
    "context_length": "max_seq_len",
}
FLOAT_FIELDS = ("rope_theta", "norm_eps")   # the other fields are integers
FLOAT_TYPES = ("F32", "F16", "BF16", "F64")   # tensor types that are always widened to float32


def load_gguf(path: str | Path, *, with_tokenizer: bool = True, dequantize: bool = False):
    """A `Model` (LLaMA family) from a llama-architecture GGUF file, tokenizer attached.

    with_tokenizer: also build the tokenizer from the file's metadata (glassformer.load_tokenizer).
    dequantize: widen quantized matrices to float32 instead of keeping their blocks.
    """
    path = Path(path)
    reader = open_gguf(path)
    architecture = metadata(reader, "general.architecture", path)
    if architecture in BY_GGUF_NAME:   # Gemma 3, Qwen3-Next, Qwen3.5: through their HF form
        return family_gguf_model(reader, path, architecture, with_tokenizer=with_tokenizer)
    if architecture == "gpt-oss":
        refuse_gpt_oss(reader, path)
    cfg = llama_config(reader, path)
    parts, tokenizer, tokenizer_error = None, None, None
    if with_tokenizer:
        try:
            parts = gguf_tokenizer_parts(reader, path)   # the same reader: parsed once
        except GlassformerError as err:
            tokenizer_error = err      # raised after the weights: their errors are named first
    tensors = reader.tensors
    # note: the reader's metadata is ~500k small NumPy views for a 49k-token vocabulary (about
    # 150 MB of Python objects for SmolLM2); dropped here, before the weights come in, the
    # process's peak memory is the larger of the two, not their sum (docs/performance.md).
    # The tokenizer's tables are built after it, in the room it left (bpe_files.py's note).
    del reader
    if parts is not None:
        try:
            tokenizer = tokenizer_from_parts(parts, path)
        except GlassformerError as err:
            tokenizer_error = err
        del parts
    params = read_params(tensors, cfg, path, dequantize=dequantize)
    if tokenizer_error is not None:
        raise tokenizer_error
    lay_out_for_decoding(params, release=release_blocks)   # in place: packed (models/layout.py)
    return Model(cfg, params, tokenizer=tokenizer)


def release_blocks(parts: list) -> None:
    """Hand back the map's pages of quantized weights that were copied (packed): the model reads
    the copy, so the originals would only be counted twice in resident memory (io/mapped.py)."""
    for part in parts:
        if is_quantized(part):
            release_pages(part.blocks)


def refuse_gpt_oss(reader, path: Path) -> None:
    """gpt-oss GGUF files keep their experts in MXFP4, a type glassformer does not read: one
    line naming it (the HF folder loads: io/hf/gpt_oss.py)."""
    kinds = sorted({tensor.tensor_type.name for tensor in reader.tensors
                    if "_exps" in tensor.name})
    stored = ", ".join(kinds) or "MXFP4"
    raise CheckpointError(f"{path}: a gpt-oss GGUF file, its experts stored as {stored}; "
                          "glassformer does not read MXFP4 (nor gpt-oss GGUF files): load the "
                          "Hugging Face folder instead")


def open_gguf(path: Path):
    """A gguf.GGUFReader over the file (its metadata arrays read whole:
    tokenizers/gguf_reader.py), or a CheckpointError naming it."""
    if not path.is_file():
        raise CheckpointError(f"no GGUF file at {path}")
    try:
        check_gguf(path)  # a truncated or corrupt file, named as such, before gguf maps it
    except GlassformerError as err:
        raise CheckpointError(str(err)) from None
    try:
        return open_reader(path)
    except (ValueError, OSError, KeyError, IndexError) as err:
        raise CheckpointError(f"{path} is a corrupt GGUF file: {err}") from None


def metadata(reader, key: str, path: Path, default=None):
    """One metadata value (str, number or list); `default` when absent, error if that is None."""
    field = reader.fields.get(key)
    if field is None:
        if default is None:
            raise CheckpointError(f"{path} has no {key} metadata")
        return default
    return field.contents()


def llama_config(reader, path: Path):
    """A LlamaConfig from the file's `llama.*` metadata (see LLAMA_KEYS)."""
    return LlamaConfig(**_config_fields(reader, path))


def _config_fields(reader, path: Path) -> dict:
    architecture = metadata(reader, "general.architecture", path)   # the file's, not our arch
    if architecture != "llama":
        raise CheckpointError(f"{path}: general.architecture is {architecture!r}; only 'llama' "
                              "GGUF files and the gemma3, qwen3next and qwen35 families are "
                              "supported")
    scaling = metadata(reader, "llama.rope.scaling.type", path, default="none")
    if scaling != "none" or "rope_freqs.weight" in _tensor_names(reader):
        raise CheckpointError(f"{path}: RoPE scaling ({scaling}) is not supported")
    fields = {}
    for key, name in LLAMA_KEYS.items():
        value = metadata(reader, f"llama.{key}", path)
        fields[name] = float(value) if name in FLOAT_FIELDS else int(value)
    # before anything per layer: a count the tensors do not hold would size the tensor table
    check_layer_count(path, "llama.block_count", fields["n_layer"], _tensor_names(reader), "blk.")
    n_tokens = len(metadata(reader, "tokenizer.ggml.tokens", path))
    vocab = int(metadata(reader, "llama.vocab_size", path, default=n_tokens))
    if vocab != n_tokens:
        raise CheckpointError(f"{path}: llama.vocab_size={vocab} but the tokenizer lists "
                              f"{n_tokens} tokens")
    head_dim = fields["d_model"] // fields["n_head"]
    rope_dims = int(metadata(reader, "llama.rope.dimension_count", path, default=head_dim))
    if rope_dims != head_dim or fields["d_model"] % fields["n_head"]:
        raise CheckpointError(f"{path}: rope.dimension_count={rope_dims} with d_model="
                              f"{fields['d_model']}, n_head={fields['n_head']}: only full-head "
                              "RoPE with head dim d_model / n_head is supported")
    tied = "output.weight" not in _tensor_names(reader)
    return {**fields, "vocab_size": vocab, "tie_embeddings": tied}


def _tensor_names(reader) -> set[str]:
    return {tensor.name for tensor in reader.tensors}


def expected_tensors(cfg) -> dict[str, tuple[str, bool, str | None]]:
    """GGUF name -> (glassformer name, transpose?, permuted heads) for every tensor of `cfg`."""
    table = {}
    for gguf_name, entry in TOP_TENSORS.items():
        if gguf_name != "output.weight" or not cfg.tie_embeddings:
            table[gguf_name] = entry
    for i in range(cfg.n_layer):
        for suffix, (name, transpose, heads) in LAYER_TENSORS.items():
            table[f"blk.{i}.{suffix}"] = (f"blocks.{i}.{name}", transpose, heads)
    return table


def read_params(tensors, cfg, path: Path, *, dequantize: bool = False) -> dict[str, np.ndarray]:
    """Every tensor (a GGUFReader's `tensors`) converted to glassformer's names and layouts:
    float32, or a QuantizedMatrix for a matrix in an ops/quant/ format unless `dequantize`.

    Key sets are compared both ways and every shape is checked before any dequantisation.
    """
    table = expected_tensors(cfg)
    tensors = {tensor.name: tensor for tensor in tensors}
    missing = sorted(set(table) - set(tensors))
    unexpected = sorted(set(tensors) - set(table))
    if missing or unexpected:
        raise CheckpointError(f"{path}: tensor names do not match a {cfg.n_layer}-layer LLaMA: "
                              f"missing {missing[:5]}, unexpected {unexpected[:5]}")
    shapes = family("llama").param_shapes(cfg)
    for gguf_name, (name, transpose, _) in table.items():
        stored = tuple(int(d) for d in reversed(tensors[gguf_name].shape))  # ggml dims reversed
        want = shapes[name][::-1] if transpose else shapes[name]
        if stored != tuple(want):
            raise CheckpointError(f"{path}: tensor {gguf_name} (-> {name}) has shape {stored}, "
                                  f"expected {tuple(want)}")
    params = {name: _convert(tensors[gguf_name], transpose, heads and getattr(cfg, heads), path,
                             dequantize)
              for gguf_name, (name, transpose, heads) in table.items()}
    if cfg.tie_embeddings and not is_quantized(params["tok_emb"]):
        # note: the tied LM head computes x @ tok_emb.T at every generated token. Kept
        # column-major, tok_emb.T is a C-contiguous (C, V) matrix, which OpenBLAS multiplies by a
        # vector faster than the transposed row-major one (docs/performance.md; SmolLM2's is
        # V x C = 113 MB, a fifth of the weights read per token). Shape and values are unchanged.
        params["tok_emb"] = np.asfortranarray(params["tok_emb"])
    return params


def _convert(tensor, transpose: bool, rope_heads: int | None, path: Path,
             dequantize: bool = True):
    """One GGUF tensor -> a fresh float32 array in glassformer's layout, or its QuantizedMatrix
    (a matrix in a quantized type, unless `dequantize`)."""
    kind = tensor.tensor_type.name
    if not dequantize and len(tensor.shape) == 2 and kind not in FLOAT_TYPES:
        return kept_quantized(tensor, transpose, rope_heads, path)
    return _widened(tensor, transpose, rope_heads, path)


def kept_quantized(tensor, transpose: bool, rope_heads: int | None, path: Path):
    """A quantized GGUF matrix as a QuantizedMatrix, `transposed` for a linear weight. Its
    blocks are a read-only view of the file's memory map, not a copy (the pages are the file's,
    read from disk as the products first touch them, shared by every process that maps the same
    file, as llama.cpp's mmap); the q and k rows reordered for RoPE (as in _widened: a row's
    blocks move with it) are a copy, the map's pages under them handed back; models/layout.py
    packs q | k | v and gate | up into copies later, handing theirs back too."""
    kind = tensor.tensor_type.name
    if kind.lower() not in FORMATS:
        raise CheckpointError(
            f"{path}: tensor {tensor.name} uses {kind}, which glassformer does not keep "
            f"quantized (supported: {', '.join(name.upper() for name in FORMATS)}); load it "
            "with --dequantize (dequantize=True) to widen it to float32")
    blocks = np.asarray(tensor.data).view(np.uint8)       # (out rows, row bytes): the map's
    if not scales_finite(kind.lower(), blocks):
        raise CheckpointError(f"{path}: tensor {tensor.name} has a non-finite scale (NaN or inf)")
    if rope_heads is not None:
        mapped, blocks = blocks, unpermute_rope_rows(blocks, rope_heads)  # whole rows move
        release_pages(mapped)   # the copy is what the model reads (io/mapped.py)
    cols = int(tensor.shape[0])                           # ggml's ne0: weights a row
    return QuantizedMatrix(kind.lower(), np.ascontiguousarray(blocks), cols, transpose)


def _widened(tensor, transpose: bool, rope_heads: int | None, path: Path) -> np.ndarray:
    """One GGUF tensor, any type gguf reads, as a fresh float32 array in glassformer's layout."""
    from gguf.quants import dequantize  # imported here, as GGUFReader is: only GGUF needs it

    try:
        weight = dequantize(tensor.data, tensor.tensor_type)     # NumPy order: (out, in)
    except NotImplementedError:
        raise CheckpointError(f"{path}: tensor {tensor.name} uses {tensor.tensor_type.name}, "
                              "which gguf cannot dequantise") from None
    weight = weight.reshape(tuple(int(d) for d in reversed(tensor.shape))).astype(np.float32)
    check_finite(path, tensor.name, weight)          # a NaN scale makes its whole block NaN
    if rope_heads is not None:
        weight = unpermute_rope_rows(weight, rope_heads)
    if transpose:
        # (out, in) -> (in, out), kept column-major: same values and shape, but x @ W then reads
        # W's memory in the order decoding's matrix-vector products stream fastest
        return np.array(weight.T, order="F")  # a fresh, writable copy (the map is read-only)
    return np.array(weight, order="C")


def unpermute_rope_rows(weight: np.ndarray, n_heads: int) -> np.ndarray:
    """Undo convert_hf_to_gguf's permute: pair-layout rows -> HF's half-layout rows.

    weight (heads * D, C): each head's rows were stored as  0, D/2, 1, D/2+1, ...;
    viewing them as (heads, D/2, 2) and swapping the last two axes gives back 0, 1, ..., D-1.
    """
    rows, cols = weight.shape
    half = rows // n_heads // 2
    paired = weight.reshape(n_heads, half, 2, cols)              # (H*D, C) -> (H, D/2, 2, C)
    return paired.swapaxes(1, 2).reshape(rows, cols)             # -> (H, 2, D/2, C) -> (H*D, C)
