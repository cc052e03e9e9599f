"""A model file's declared layer count, checked against the layers its tensors hold, first.

Every loader builds a table per declared layer (the tensor names and shapes it expects: one row
per tensor of each layer) before it compares that table with the file. A config.json or GGUF
header is only a few numbers, so a crafted one can declare 10^9 layers over a file that holds
30: the table alone would take tens of GB before any comparison failed. So the declared count
is compared first with the layer indices the file's tensor names carry, which costs one pass
over names the file already listed:

    declared  n_layer=1000000 (config.json num_hidden_layers, GGUF llama.block_count)
    file      layers.0. .. layers.29.  -> 30 layers
    refused   before any per-layer table exists, one line naming the field and both counts

Sizes (widths, vocabulary) need no such check: they make shape tuples, never arrays, until every
shape has matched a tensor the file holds. The context (max_position_embeddings) sizes nothing at
load: the KV cache is sized by each request (generate/generate.py).
"""
from __future__ import annotations

import re

from glassformer.errors import CheckpointError


def layer_indices(names, prefix: str) -> set[int]:
    """The layer indices i of names that start with `prefix` + i + "." ("layers." -> {0, 1})."""
    pattern = re.compile(re.escape(prefix) + r"(\d+)\.")
    found = set()
    for name in names:
        match = pattern.match(name)
        if match:
            found.add(int(match.group(1)))
    return found


def first_gap(indices: set[int]) -> int:
    """The smallest i >= 0 not in `indices` (a walk over the sorted indices: no range built)."""
    gap = 0
    for i in sorted(indices):
        if i != gap:
            break
        gap += 1
    return gap


def check_layer_count(where, field: str, declared: int, names, prefix: str) -> None:
    """Refuse `declared` layers unless the file's names hold exactly layers 0 .. declared - 1.

    where: the file or folder named in the error; field: the declaring key
    ("llama.block_count"); names: the file's tensor names; prefix: a layer's name start before
    its index ("blk.").
    """
    held = layer_indices(names, prefix)
    if len(held) == declared and (not held or max(held) == declared - 1):
        return                                   # declared distinct indices, all below declared
    if not held:
        holds = f"no {prefix}N. tensors"
    elif held == set(range(len(held))):
        holds = f"tensors of {len(held):,} layers ({prefix}0 .. {prefix}{len(held) - 1})"
    else:
        missing = first_gap(held)
        holds = (f"tensors of {len(held):,} layers numbered up to {prefix}{max(held)}, "
                 f"without {prefix}{missing}")
    raise CheckpointError(f"{where}: {field} declares {declared:,} layers, but the weights "
                          f"hold {holds}")


def _is_count(value) -> bool:
    """An int a config could mean as a layer count (a bool or a string is the config check's)."""
    return isinstance(value, int) and not isinstance(value, bool)


def layer_prefix(rows) -> str | None:
    """A rename table's layer name start before "{i}" ("layers.{i}.mlp..." -> "layers.")."""
    for row in rows:
        if "{i}" in row.theirs:
            return row.theirs.split("{i}")[0]
    return None


# config.json keys that count a Hugging Face model's layers, and the table whose rows they count:
# the (encoder's) layer rows, or an encoder-decoder's decoder rows. The first key present counts.
HF_LAYER_KEYS = {"layer": ("n_layer", "num_hidden_layers", "encoder_layers"),
                 "dec_layer": ("decoder_layers",)}


def check_hf_layer_counts(where, config: dict, names, table_names) -> None:
    """config.json's layer counts against a Hugging Face file's tensor names (io/hf_names.py's
    table keys, prefix removed), before the family config (or anything per layer) is built.

    names: the family's FamilyNames (io/hf/records.py), whose rows say how a layer is named.
    """
    tables = {"layer": names.layer, "dec_layer": names.dec_layer}
    for side, keys in HF_LAYER_KEYS.items():
        prefix = layer_prefix(tables[side])
        key = next((key for key in keys if key in config), None)
        if prefix is None or key is None or not _is_count(config[key]):
            continue
        check_layer_count(where, f"config.json {key}", config[key], table_names, prefix)


def check_our_layer_counts(where, config: dict, names) -> None:
    """A glassformer config.json's n_layer (and an encoder-decoder's n_dec_layer, None meaning
    n_layer) against the params' names (blocks.N., or enc.blocks.N. and dec.blocks.N.)."""
    names = list(names)
    seq2seq = any(name.startswith("enc.blocks.") for name in names)
    n_layer = config.get("n_layer")
    if _is_count(n_layer):
        check_layer_count(where, "config.json n_layer", n_layer, names,
                          "enc.blocks." if seq2seq else "blocks.")
    n_dec = config.get("n_dec_layer")
    n_dec = n_layer if n_dec is None else n_dec
    if seq2seq and _is_count(n_dec):
        field = "n_dec_layer" if config.get("n_dec_layer") is not None else "n_layer"
        check_layer_count(where, f"config.json {field}", n_dec, names, "dec.blocks.")
