"""The records io/gguf_hf.py reads a GGUF family through: llama.cpp's names <-> Hugging Face's.

A GGUF file of a newer family (Gemma 3, Qwen3-Next, Qwen3.5) is loaded in two steps, each undoing
what llama.cpp's convert_hf_to_gguf.py did:

    GGUF metadata  {arch}.block_count, {arch}.ssm.conv_kernel, ...  --hf_config-->  config.json
    GGUF tensors   blk.N.ssm_a, blk.N.attn_qkv, ...                 --rows------->  HF tensors

and from there the family's own Hugging Face loader (io/hf/, io/hf_names.py) makes the model, so
no model math and no glassformer names live here. Writing goes the other way (`metadata`, each
row's `save`).

    GGUFArch  one general.architecture: its glassformer arch, its config.json model_type, and
              three functions (metadata -> config.json, config.json -> metadata, tensor rows)
    Row       one GGUF tensor <-> the HF tensors it is made of, with the two conversions
    Meta      the file's `{arch}.*` keys, read with one clear line for a missing one
"""
from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np

from glassformer.errors import CheckpointError


def _same(cfg: dict, *arrays: np.ndarray) -> tuple:
    return arrays


class Row(NamedTuple):
    """GGUF tensors <-> the HF tensors they are made of (most rows: one and one).

    gguf: the GGUF names ("blk.3.ssm_a.weight",); hf: the HF keys without the "model." prefix
    ("layers.3.linear_attn.A_log",); need: what the tensor holds, for the error naming a
    missing one; load: (config.json, *GGUF arrays) -> the HF arrays in `hf` order; save:
    (config.json, *HF arrays) -> the GGUF arrays in `gguf` order. Arrays are NumPy-ordered
    (GGUF's dims reversed), which is torch's order: a plain rename changes nothing."""
    gguf: tuple[str, ...]
    hf: tuple[str, ...]
    need: str
    load: Callable = _same
    save: Callable = _same


def shared_metadata(hf: dict) -> dict:
    """config.json -> the {arch}.* keys every decoder family writes the same way (sizes, heads,
    the norm's epsilon); a family adds its own (RoPE, windows, states)."""
    return {"context_length": hf["max_position_embeddings"], "vocab_size": hf["vocab_size"],
            "embedding_length": hf["hidden_size"], "block_count": hf["num_hidden_layers"],
            "feed_forward_length": hf["intermediate_size"],
            "attention.head_count": hf["num_attention_heads"],
            "attention.head_count_kv": hf["num_key_value_heads"],
            "attention.key_length": hf["head_dim"], "attention.value_length": hf["head_dim"],
            "attention.layer_norm_rms_epsilon": float(hf["rms_norm_eps"])}


def rename(gguf: str, hf: str, need: str) -> Row:
    return Row((gguf,), (hf,), need)


def plus_one(gguf: str, hf: str, need: str) -> Row:
    """A zero-centred RMSNorm weight (HF stores w, the gain is 1 + w): GGUF stores 1 + w."""
    return Row((gguf,), (hf,), need, load=lambda cfg, w: (w - 1.0,),
               save=lambda cfg, w: (w + 1.0,))


class GGUFArch(NamedTuple):
    name: str            # general.architecture ("qwen35")
    arch: str            # glassformer's arch ("qwen3_5")
    model_type: str      # config.json's model_type ("qwen3_5_text")
    hf_config: Callable  # (Meta, tensor names) -> config.json dict
    metadata: Callable   # config.json dict -> {key without "{arch}.": value}
    rows: Callable       # config.json dict -> every Row a model of that config may hold


MISSING = object()


class Meta:
    """The `{arch}.*` metadata of one open GGUF file (gguf.GGUFReader)."""

    def __init__(self, reader, path, arch: str):
        self.reader, self.path, self.arch = reader, path, arch

    def has(self, key: str) -> bool:
        return f"{self.arch}.{key}" in self.reader.fields

    def get(self, key: str, what: str, default=MISSING):
        """The value of `{arch}.key`; a missing key without a default is one line naming it
        and `what` it holds."""
        field = self.reader.fields.get(f"{self.arch}.{key}")
        if field is None:
            if default is MISSING:
                raise CheckpointError(f"{self.path} has no {self.arch}.{key} metadata (expected "
                                      f"{what}, as llama.cpp's convert_hf_to_gguf.py writes it)")
            return default
        return field.contents()

    def layers(self) -> int:
        """The decoder layers: block_count less the multi-token-prediction layers llama.cpp
        appends after them (nextn_predict_layers, Qwen3.5), which glassformer does not run."""
        blocks = self.int("block_count", "the number of layers")
        extra = self.int("nextn_predict_layers", "the MTP layers after the decoder", default=0)
        if extra > blocks:
            raise CheckpointError(f"{self.path}: {self.arch}.nextn_predict_layers={extra} is more "
                                  f"than {self.arch}.block_count={blocks}")
        return blocks - extra

    def int(self, key: str, what: str, default=MISSING) -> int:
        value = self.get(key, what, default)
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
            raise CheckpointError(f"{self.path}: {self.arch}.{key} is {value!r}, expected {what} "
                                  "(a whole number)")
        return int(value)

    def float(self, key: str, what: str, default=MISSING) -> float:
        value = self.get(key, what, default)
        if isinstance(value, (bool, str, list)):
            raise CheckpointError(f"{self.path}: {self.arch}.{key} is {value!r}, expected {what}")
        value = float(value)
        if np.float32(value) == value:     # a FLOAT32 key: the shortest decimal it came from
            return float(str(np.float32(value)))     # (1e-05, not 9.999999747378752e-06)
        return value
