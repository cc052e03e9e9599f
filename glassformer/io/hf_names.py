"""Hugging Face state dicts <-> glassformer params, through each family's rename table.

The tables are in io/hf/<family>.py (`FamilyNames`, io/hf/records.py); this module applies them.
Each table row pairs a glassformer name with an HF key ("{i}" stands for the layer index) and
says whether to transpose:

    torch nn.Linear (LLaMA, Qwen2, Mistral, BERT) stores W as (out, in)  -> transpose to (in, out)
    GPT-2's Conv1D stores W as (in, out), glassformer's layout already  -> no transpose
    GPT-2's fused c_attn (C, 3C) holds [W_q | W_k | W_v] side by side -> split into wq, wk, wv
    a mixture of experts stores one tensor per expert (experts.{e}.up_proj) -> stacked (E, ...)

Base-model keys carry a prefix in the *ForCausalLM / *ForMaskedLM files ("transformer.", "model.",
"bert.") and none in bare-model files; both are accepted. A tied head has no tensor of its own:
`lm_head.weight` (or BERT's MLM decoder) is absent or an exact copy of the embedding.
Keys listed in `FamilyNames.ignored` are buffers (masks, position ids, RoPE frequencies) or heads
glassformer does not compute (BERT's pooler and next-sentence head); every other key must map.
config.json's keys are io/hf_config.py's.
"""
from __future__ import annotations

import re

import numpy as np

from glassformer.errors import CheckpointError
from glassformer.io.hf.records import (Convert, FamilyNames, Rename, Split, Squeeze, Stack,
                                      file_prefix)
from glassformer.io.hf.registry import hf_family
from glassformer.models.registry import family


def family_names(arch: str) -> FamilyNames:
    """The rename table of glassformer's arch `arch` (io/hf/<family>.py)."""
    return hf_family(arch).names


def _rows(names: FamilyNames, n_layer: int, n_dec_layer: int = 0) -> list:
    """Every table row with "{i}" filled in, layer rows prefixed with "blocks.{i}." (an
    encoder-decoder's: "enc.blocks.{i}." and, for its n_dec_layer layers, "dec.blocks.{i}.")."""
    rows = list(names.top)    # a Convert row of `top` has no "{i}" to fill
    stacks = ((names.layer, names.layer_ours, n_layer),
              (names.dec_layer, names.dec_layer_ours, n_dec_layer))
    for table, ours, count in stacks:
        for i in range(count):
            mine = ours.format(i=i)
            for row in table:
                if isinstance(row, Split):
                    rows.append(Split(tuple(mine + o for o in row.ours), row.theirs.format(i=i),
                                      row.interleaved))
                elif isinstance(row, Convert):
                    rows.append(row._replace(ours=tuple(mine + o for o in row.ours),
                                             theirs=tuple(t.format(i=i) for t in row.theirs)))
                elif isinstance(row, Stack):  # "{e}" stays for the expert index
                    rows.append(Stack(mine + row.ours, row.theirs.replace("{i}", str(i)),
                                      row.transpose))
                else:
                    rows.append(Rename(mine + row.ours, row.theirs.format(i=i), row.transpose))
    return rows


def _rows_of(arch: str, cfg) -> list:
    """_rows for this config (decoder layers counted for an encoder-decoder)."""
    return _rows(family_names(arch), cfg.n_layer, getattr(cfg, "decoder_layers", 0))


def hf_shapes(arch: str, cfg) -> dict[str, tuple[int, ...]]:
    """The HF keys (without prefix) and shapes a checkpoint of this config must hold."""
    ours = family(arch).param_shapes(cfg)
    shapes = {}
    for row in _rows_of(arch, cfg):
        if isinstance(row, Convert):
            if row.ours[0] in ours:
                shapes.update(zip(row.theirs, row.shapes(cfg, *(ours[n] for n in row.ours))))
        elif isinstance(row, Split):
            if row.ours[0] in ours:
                parts = [ours[name] for name in row.ours]
                shapes[row.theirs] = parts[0][:-1] + (sum(p[-1] for p in parts),)
        elif isinstance(row, Squeeze):
            if row.ours in ours:
                shapes[row.theirs] = (1,) + ours[row.ours]                   # (N,) -> (1, N)
        elif isinstance(row, Stack):
            if row.ours in ours:
                n_experts, *part = ours[row.ours]                            # (E, ...) -> E x
                for e in range(n_experts):
                    shapes[row.theirs.format(e=e)] = tuple(part[::-1] if row.transpose else part)
        elif row.ours in ours:
            shape = ours[row.ours]
            shapes[row.theirs] = shape[::-1] if row.transpose else shape
    return shapes


def to_glassformer(arch: str, cfg, tensors: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """HF tensors (keys without prefix, already checked by shape) -> glassformer params.

    Every array is contiguous float32 in glassformer's (in, out) layout: transposed weights stay a
    column-major view of the file's (out, in) rows, others are row-major; a copy only when split
    or widened, else the tensor itself (as read from the file).
    """
    params = {}
    for row in _rows_of(arch, cfg):
        if isinstance(row, Convert):
            if row.theirs[0] in tensors:
                arrays = row.load(cfg, *(tensors[key] for key in row.theirs))
                params.update((name, np.ascontiguousarray(array, dtype=np.float32))
                              for name, array in zip(row.ours, arrays))
            continue
        if isinstance(row, Stack):
            if row.theirs.format(e=0) in tensors:
                params[row.ours] = _stacked(row, tensors)
            continue
        if row.theirs not in tensors:
            continue
        tensor = tensors[row.theirs]
        if isinstance(row, Squeeze):
            params[row.ours] = np.ascontiguousarray(tensor.reshape(-1), dtype=np.float32)
        elif isinstance(row, Split):
            parts = split_parts(tensor, len(row.ours), row.interleaved)  # (C, 3C) -> 3 x (C, C)
            for name, part in zip(row.ours, parts):
                params[name] = np.ascontiguousarray(part, dtype=np.float32)
        elif row.transpose:
            # (out, in) -> (in, out) as a view: column-major, no copy for float32, and the
            # order that decoding's matrix-vector products x @ W stream fastest
            params[row.ours] = np.asfortranarray(tensor.T, dtype=np.float32)
        else:
            params[row.ours] = np.ascontiguousarray(tensor, dtype=np.float32)
    return params


def split_parts(tensor: np.ndarray, n: int, interleaved: bool) -> list[np.ndarray]:
    """A Split row's tensor (..., n F) -> its n parts (..., F): side by side, or alternating
    (part j = columns j, j + n, j + 2n, ...)."""
    if interleaved:
        return [tensor[..., j::n] for j in range(n)]
    return np.split(tensor, n, axis=-1)


def join_parts(parts: list[np.ndarray], interleaved: bool) -> np.ndarray:
    """split_parts undone: n arrays (..., F) -> (..., n F)."""
    if not interleaved:
        return np.concatenate(parts, axis=-1)
    joined = np.stack(parts, axis=-1)                                # (..., F, n)
    return joined.reshape(joined.shape[:-2] + (-1,))                 # (..., F n), alternating


def _stacked(row: Stack, tensors: dict) -> np.ndarray:
    """Expert 0, 1, ... of a Stack row as one (E, ...) float32 array (a copy, C-contiguous)."""
    slices = []
    e = 0
    while row.theirs.format(e=e) in tensors:
        tensor = tensors[row.theirs.format(e=e)]
        slices.append(tensor.T if row.transpose else tensor)                 # -> (in, out)
        e += 1
    return np.ascontiguousarray(np.stack(slices), dtype=np.float32)         # (E, in, out)


def to_hf(arch: str, cfg, params: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """glassformer params -> HF tensors: torch layouts, base-model keys with the task prefix."""
    names = family_names(arch)
    prefix = file_prefix(hf_family(arch), cfg)   # none in a bare-model file (BertModel)
    tensors = {}
    for row in _rows_of(arch, cfg):
        if isinstance(row, Convert):
            if row.ours[0] in params:
                for key, array in zip(row.theirs, row.save(cfg, *(params[n] for n in row.ours))):
                    key = key if key.startswith(names.outside) else prefix + key
                    tensors[key] = np.ascontiguousarray(array, dtype=np.float32)
            continue
        if isinstance(row, Split):
            if row.ours[0] not in params:
                continue
            array = join_parts([params[name] for name in row.ours], row.interleaved)  # (C, 3C)
        elif isinstance(row, Squeeze):
            if row.ours not in params:
                continue
            array = params[row.ours][None]                                 # (N,) -> (1, N)
        elif isinstance(row, Stack):
            for e, part in enumerate(params.get(row.ours, ())):              # (E, ...) -> E x
                key = prefix + row.theirs.format(e=e)
                tensors[key] = np.ascontiguousarray(part.T if row.transpose else part,
                                                    dtype=np.float32)
            continue
        elif row.ours in params:
            array = params[row.ours].T if row.transpose else params[row.ours]  # -> (out, in)
        else:
            continue
        key = row.theirs if row.theirs.startswith(names.outside) else prefix + row.theirs
        tensors[key] = np.ascontiguousarray(array, dtype=np.float32)
    return tensors


def hf_keys_by_table_name(arch: str, keys) -> dict[str, str]:
    """File keys -> {table key: file key}: prefix removed, ignored buffers and heads dropped."""
    names = family_names(arch)
    ignored = re.compile("|".join(names.ignored) or "(?!)")  # "(?!)": an empty list skips none
    table = {}
    for key in keys:
        name = key[len(names.prefix):] if key.startswith(names.prefix) else key
        if ignored.fullmatch(name):
            continue
        if name in table:
            raise CheckpointError(f"tensor {name!r} appears twice, as {table[name]!r} and {key!r}")
        table[name] = key
    return table
