"""What an SAE reads and writes back: the residual stream at one hook of a causal LM.

Two functions stand in for the hook points of glassformer/interpret/ (run_with_cache,
run_with_hooks) until those reach this branch; each is then one line to switch:

    activations(model, ids, hook)             the hook's value, (B, T, C)
    logits_with(model, ids, hook, value)      the logits when the hook's value is replaced

They read the stream the model's own forward computes: `blocks.L.hook_resid_post` is the x a
layer's loop hands to layer L + 1 (models/common.py: layers_forward's `on_layer`), and
`blocks.L.hook_resid_pre` the x entering layer L (hook_resid_post of L - 1, or the embeddings).
Only the layers up to L run for `activations`: the rest cannot change what L wrote. With a
replacement, the layers after L run on it through the same decoder_forward the model uses.
"""
from __future__ import annotations

import dataclasses
import re

import numpy as np

from glassformer.errors import GlassformerError
from glassformer.models.common import decoder_forward
from glassformer.models.family import CAUSAL
from glassformer.models.model import Model

_HOOK = re.compile(r"blocks\.(\d+)\.hook_resid_(pre|post)")


def hook_layer(model: Model, hook: str) -> int:
    """The layer after which the hook's stream is read: L for blocks.L.hook_resid_post,
    L - 1 for blocks.L.hook_resid_pre (-1: the embeddings)."""
    found = _HOOK.fullmatch(hook)
    if found is None:
        raise GlassformerError(f"unknown hook {hook!r}: an SAE reads the residual stream, "
                               "blocks.L.hook_resid_post or blocks.L.hook_resid_pre")
    layer, where = int(found.group(1)), found.group(2)
    if layer >= model.cfg.n_layer:
        raise GlassformerError(f"hook {hook!r}: the model has layers 0..{model.cfg.n_layer - 1}")
    if model.family.kind != CAUSAL:
        raise GlassformerError(f"SAE hooks read causal LMs; {model.arch} is {model.family.kind}")
    return layer if where == "post" else layer - 1


def _first_layers(model: Model, count: int) -> tuple[dict, object]:
    """(params, cfg) of the model cut to its first `count` layers (same arrays, no copies)."""
    params = {key: w for key, w in model.params.items()
              if not key.startswith("blocks.") or int(key.split(".")[1]) < count}
    return params, dataclasses.replace(model.cfg, n_layer=count)


def activations(model: Model, ids: np.ndarray, hook: str) -> np.ndarray:
    """The residual stream at `hook`, (B, T, C), for ids (B, T)."""
    layer = hook_layer(model, hook)
    ids = np.asarray(ids)
    run = max(layer + 1, 1)
    params, cfg = _first_layers(model, run)
    seen = {}

    def on_layer(i, ctx, x_in, x_out):
        if i == max(layer, 0):
            seen["x"] = x_in if layer < 0 else x_out     # (B, T, C)

    model.family.forward(params, ids, cfg, last_only=True, on_layer=on_layer)
    return seen["x"]


def logits_with(model: Model, ids: np.ndarray, hook: str, value: np.ndarray) -> np.ndarray:
    """Logits (B, T, V) when the stream at `hook` is `value` (B, T, C) instead of its own: the
    layers after the hook run on value, then the final norm and the LM head."""
    layer = hook_layer(model, hook)
    ids = np.asarray(ids)
    if value.shape != (*ids.shape, model.cfg.d_model):
        raise GlassformerError(f"a replacement for {hook} must be {(*ids.shape, model.cfg.d_model)}"
                               f", got {value.shape}")
    bcfg = model.cfg.block_config()
    if bcfg.moe is not None:
        raise GlassformerError("splicing into a mixture-of-experts model needs the hook points "
                               "of glassformer/interpret (run_with_hooks)")
    rest = model.cfg.n_layer - layer - 1
    params = {key: w for key, w in model.params.items() if not key.startswith("blocks.")}
    for i in range(rest):                     # layer layer+1+i runs as layer i of the rest
        prefix = f"blocks.{layer + 1 + i}."
        params.update({f"blocks.{i}.{key[len(prefix):]}": w for key, w in model.params.items()
                       if key.startswith(prefix)})
    positions = np.arange(ids.shape[1])
    logits, _, _ = decoder_forward(params, value, bcfg, rest, frozen=False, last_only=False,
                                   positions=positions)
    return logits
