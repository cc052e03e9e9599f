"""What an SAE reads and writes back: one hook point's value, through glassformer/interpret's
run_with_cache and run_with_hooks (TransformerLens's names: blocks.L.hook_resid_post, ...).

    activations(model, ids, hook)             the hook's value, (B, T, d)
    logits_with(model, ids, hook, value)      the logits when the hook's value is replaced

An SAE reads a stream of vectors, one per position: the hook's value must be (B, T, d) (the
residual stream, attn_out, mlp_out, the MLP's hidden layer...), d its width.

`activations` runs only the layers up to the hook's: the layers after it cannot change its
value, and on SmolLM2's layer 15 of 30 that halves the forward. The model cut to those layers
is the same arrays under a config with fewer layers (no copies).
"""
from __future__ import annotations

import dataclasses

import numpy as np

from glassformer.errors import GlassformerError
from glassformer.interpret.cache import run_with_cache, run_with_hooks
from glassformer.interpret.hooks import check_names, hook_shapes, split_name
from glassformer.models.model import Model


def hook_width(model: Model, hook: str) -> int:
    """d of a hook whose value is (B, T, d); one line for an unknown hook (with the near names)
    or one of another shape."""
    shapes = hook_shapes(model)
    check_names([hook], shapes)
    if len(shapes[hook]) != 3:
        raise GlassformerError(f"an SAE reads one vector per position; {hook} has shape "
                               f"{shapes[hook]} for (B=1, T=1): pick a (B, T, d) hook such as "
                               "blocks.L.hook_resid_post")
    return shapes[hook][-1]


def model_through(model: Model, hook: str) -> Model:
    """The model cut to the layers up to the hook's (the model itself for a hook outside the
    layers, such as ln_final.hook_normalized)."""
    layer, _ = split_name(hook)
    if layer is None or layer + 1 == model.cfg.n_layer:
        return model
    params = {key: w for key, w in model.params.items()
              if not key.startswith("blocks.") or int(key.split(".")[1]) <= layer}
    return Model(dataclasses.replace(model.cfg, n_layer=layer + 1), params, model.tokenizer)


def activations(model: Model, ids: np.ndarray, hook: str) -> np.ndarray:
    """The value of `hook`, (B, T, d), for ids (B, T)."""
    hook_width(model, hook)
    _, cache = run_with_cache(model_through(model, hook), np.asarray(ids), names=[hook])
    return cache[hook]


def logits_with(model: Model, ids: np.ndarray, hook: str, value: np.ndarray) -> np.ndarray:
    """Logits (B, T, V) when the value at `hook` is `value` (B, T, d) instead of its own."""
    return run_with_hooks(model, np.asarray(ids), fwd_hooks=[(hook, lambda _, name: value)])
