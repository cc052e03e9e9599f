"""run_with_cache and run_with_hooks: TransformerLens's two calls, on a glassformer model.

    logits, cache = run_with_cache(model, ids)                      # every hook point
    logits, cache = run_with_cache(model, ids, names=["blocks.3.hook_resid_post"])
    logits = run_with_hooks(model, ids, fwd_hooks=[("blocks.0.attn.hook_z", zero_head_2)])

run_with_cache runs the ordinary forward with a per-layer reader (models/common.py's on_layer):
after each layer the requested names are read off its ctx (interpret/hooks.py) and the ctx is
dropped, so a cache holds what was asked for and no more. Its size is estimated from the hook
shapes and checked against the memory budget before the forward starts (glassformer/memory.py).

run_with_hooks hands the functions at the points where a value may be replaced to the forward
(blocks/hooks.py: resid, attn_out, mlp_out, q/k/v, z); a function at any other point (the
pattern, the scores, the norms, the MLP's inside) reads the value off the ctx as the forward
goes, and may not return a replacement. `fn(value, hook_name)` returns None or the new value.
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from glassformer.blocks.residual import layer_input
from glassformer.errors import GlassformerError
from glassformer.interpret.hooks import (REPLACEABLE, check_names, hook_shapes, layer_values,
                                         replaceable, split_name)
from glassformer.memory import check_memory, human_bytes
from glassformer.models.common import split_layers
from glassformer.models.family import CAUSAL, ENCODER


class ActivationCache(Mapping):
    """{hook name: NumPy array}; an unknown name is one line listing the nearest ones."""

    def __init__(self, values: dict[str, np.ndarray]):
        self._values = values

    def __getitem__(self, name: str) -> np.ndarray:
        if name not in self._values:
            check_names([name], self._values)
        return self._values[name]

    def __contains__(self, name) -> bool:
        return name in self._values

    def __iter__(self):
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"ActivationCache({len(self)} hooks, {human_bytes(self.nbytes())})"

    def nbytes(self) -> int:
        return int(sum(v.nbytes for v in self._values.values()))


def _ids(model, ids) -> np.ndarray:
    ids = np.asarray(ids)
    if ids.ndim == 1:
        ids = ids[None]                                                  # (T,) -> (1, T)
    if ids.ndim != 2 or ids.dtype.kind not in "iu":
        raise GlassformerError(f"expected token ids (T,) or (B, T) of integers, got shape "
                               f"{ids.shape} dtype {ids.dtype}")
    return ids


def check_family(model) -> None:
    """Hook points cover causal LMs and encoders (BERT); one line for an encoder-decoder."""
    if model.family.kind not in (CAUSAL, ENCODER):
        raise GlassformerError(f"hook points cover causal LMs and BERT-style encoders; "
                               f"{model.arch} is an encoder-decoder")
    if model.family.new_cache is not None:   # a hybrid: Gated DeltaNet layers beside attention
        raise GlassformerError(f"hook points cover attention layers; {model.arch} mixes Gated "
                               "DeltaNet (linear attention) layers in, which have none yet")


def cache_bytes(model, ids, names=None) -> int:
    """Bytes the cache of `names` (default: every hook) takes for ids (B, T), before running."""
    b, t = _ids(model, ids).shape
    shapes = hook_shapes(model, b, t)
    names = list(shapes) if names is None else names
    itemsize = np.dtype(model.params["tok_emb"].dtype).itemsize
    return int(sum(int(np.prod(shapes[n])) for n in names)) * max(itemsize, 4)


def _reader(model, wanted: dict, on_value):
    """on_layer(i, ctx, x_in, x_out): reads the wanted {layer: [local names]} off each layer and
    hands every value to on_value(name, value)."""
    layers = split_layers(model.params, model.cfg.n_layer)

    def on_layer(i, ctx, x_in, x_out):
        if i in wanted:
            for local, value in layer_values(ctx, x_in, x_out, layers[i], wanted[i]).items():
                on_value(f"blocks.{i}.{local}", value)
    return on_layer


def _group_by_layer(names) -> dict:
    wanted = {}
    for name in names:
        layer, local = split_name(name)
        if layer is not None:
            wanted.setdefault(layer, []).append(local)
    return wanted


def _top_values(model, ids: np.ndarray, ctx, names, on_value) -> None:
    """hook_embed, hook_pos_embed, ln_final.*: the embeddings looked up again (the same rows),
    the final norm's read off the head's ctx."""
    for name in names:
        if name == "hook_embed":
            on_value(name, model.params["tok_emb"][ids])                 # (B, T, C)
        elif name == "hook_pos_embed":
            t = ids.shape[1]
            on_value(name, np.broadcast_to(model.params["pos_emb"][:t], ids.shape + (
                model.params["pos_emb"].shape[1],)))
        elif name.startswith("ln_final."):
            inner = ctx.head.norm_f.inner
            on_value(name, inner.xhat if name.endswith("normalized") else 1.0 / inner.rstd)


def _forward_reading(model, ids: np.ndarray, names, on_value, hooks=None):
    """The forward, handing each wanted hook's value to on_value; returns the logits."""
    wanted = _group_by_layer(names)
    if model.family.kind == CAUSAL:
        logits, ctx = model.forward(ids, on_layer=_reader(model, wanted, on_value), hooks=hooks)
    else:  # an encoder keeps its layers' ctxs; read them after the forward
        logits, ctx = model.forward(ids, hooks=hooks)
        _read_encoder_layers(model, ctx, logits, wanted, on_value)
    _top_values(model, ids, ctx, [n for n in names if split_name(n)[0] is None], on_value)
    return logits


def _read_encoder_layers(model, ctx, out, wanted, on_value) -> None:
    """A post-norm encoder (BERT): layer i's input is what its q projection kept (layer_input),
    its output the next layer's input, or the encoder's last hidden state."""
    layers = split_layers(model.params, model.cfg.n_layer)
    streams = [layer_input(c) for c in ctx.blocks]
    for i, block_ctx in enumerate(ctx.blocks):
        if i not in wanted:
            continue
        x_out = streams[i + 1] if i + 1 < len(streams) else _encoder_output(model, ctx, out)
        for local, value in layer_values(block_ctx, streams[i], x_out, layers[i],
                                         wanted[i]).items():
            on_value(f"blocks.{i}.{local}", value)


def _encoder_output(model, ctx, out) -> np.ndarray:
    """The last layer's output: the model's output, or the MLM head's input when it has one."""
    return out if getattr(ctx, "mlm", None) is None else ctx.mlm.dense.x


def run_with_cache(model, ids, names=None, *, max_cache_mb: float | None = None):
    """(logits, ActivationCache): the forward's output and the value of every hook point named
    (default: all of them, interpret/hooks.py's table). ids: (T,) or (B, T) token ids.

    max_cache_mb: refuse, before running, a cache estimated larger (default: the memory budget,
    half this machine's memory)."""
    check_family(model)
    ids = _ids(model, ids)
    shapes = hook_shapes(model, *ids.shape)
    names = list(shapes) if names is None else check_names(names, shapes)
    need = cache_bytes(model, ids, names)
    budget = None if max_cache_mb is None else int(max_cache_mb * (1 << 20))
    check_memory(need, f"the activation cache of {len(names)} hooks for {ids.shape[0]} x "
                 f"{ids.shape[1]} tokens", "name fewer hooks, or use fewer tokens"
                 + (" or raise --max-cache-mb" if budget else ""), budget=budget,
                 budget_is="--max-cache-mb" if budget else "half this machine's memory")
    values = {}

    def keep(name, value):
        values[name] = value
    logits = _forward_reading(model, ids, names, keep)
    return logits, ActivationCache({n: values[n] for n in names if n in values})


def run_with_hooks(model, ids, fwd_hooks=()):
    """The logits of a forward with fwd_hooks [(name, fn(value, name)), ...] run at their
    points; fn may return a replacement where the forward asks (interpret/hooks.py:
    replaceable), else it must return None."""
    check_family(model)
    ids = _ids(model, ids)
    shapes = hook_shapes(model, *ids.shape)
    replace, read = {}, {}
    for name, fn in fwd_hooks:
        check_names([name], shapes)
        (replace if replaceable(model, name) else read).setdefault(name, []).append(fn)

    def call_readers(name, value):
        for fn in read.get(name, ()):
            if fn(value, name) is not None:
                raise GlassformerError(
                    f"hook {name} can be read but not replaced in {model.arch}; the points that "
                    f"may take a replacement: hook_embed, hook_pos_embed (causal LMs), "
                    f"blocks.L.{{{', '.join(REPLACEABLE)}}} (attn.* not in latent attention)")
    logits = _forward_reading(model, ids, list(read), call_readers, hooks=replace or None)
    return logits

