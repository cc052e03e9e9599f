"""Direct logit attribution, and attribution patching: which parts of a pre-norm causal LM write
the logit (difference) of a target token.

Direct logit attribution. The last residual stream is a sum, term by term:

    x_final = embed (+ pos_embed) + sum over layers l ( sum over heads h  z[l,h] W_O[l,h]
                                                        + b_O[l] + mlp_out[l] )

The final norm is linear in x once its per-token scale (1 / rstd) is fixed at the value the
forward used, so each term's share of the logit of `target` (minus `other`'s) is

    share(term) = centre(term) * rstd * w_f . (W_U[:, target] - W_U[:, other])

(centre: minus the term's mean over C, LayerNorm only; RMSNorm does not centre), and the final
norm's own shift b_f adds b_f . (W_U[:, target] - W_U[:, other]). The shares add up to the logit
(difference) the forward computed, up to float rounding: the check that the decomposition is
whole. TransformerLens reaches the same numbers with cache.decompose_resid / stack_head_results
(apply_ln=True) times w_f . direction.

Attribution patching (Nanda 2023): patching activation A from the corrupted run to the clean
run changes the metric by about (A_clean - A_corrupt) . dmetric/dA, the gradient taken on the
corrupted run. One forward and one backward give it for every layer, position and head at
once; the backward is glassformer's own (blocks/residual.py, walked layer by layer to read the
gradient of the stream at each layer's input and between its sub-blocks).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from glassformer.blocks.residual import block_backward, mlp_sub_block_backward
from glassformer.errors import GlassformerError
from glassformer.interpret.cache import _ids, run_with_cache
from glassformer.interpret.patching import (Patching, PatchTable, check_same_length,
                                            hook_name, logit_diff_metric)
from glassformer.models.common import head_backward
from glassformer.models.family import CAUSAL
from glassformer.ops.quant import as_array


class Attribution(NamedTuple):
    """labels[i]'s share of the logit (difference) is values[i]; their sum is `total`, the
    forward's own logit (difference) is `logit`."""
    labels: list[str]
    values: np.ndarray       # (n_terms,) float64
    total: float
    logit: float

    def top(self, n: int = 10) -> list[tuple[str, float]]:
        order = np.argsort(-np.abs(self.values))[:n]
        return [(self.labels[i], float(self.values[i])) for i in order]


def unembed_direction(model, target: int, other: int | None) -> np.ndarray:
    """W_U[:, target] - W_U[:, other] (C,) float64 (W_U: lm_head, or tok_emb^T when tied)."""
    w_u = as_array(model.params["lm_head"] if "lm_head" in model.params
                   else model.params["tok_emb"].T)                          # (C, V)
    vocab = w_u.shape[1]
    for token in (target, other):
        if token is not None and not 0 <= int(token) < vocab:
            raise GlassformerError(f"token id {token} is outside the vocabulary 0..{vocab - 1}")
    direction = w_u[:, int(target)].astype(np.float64)
    if other is not None:
        direction = direction - w_u[:, int(other)]
    return direction


def _check_decoder(model) -> None:
    if model.family.kind != CAUSAL or model.cfg.block_config().norm_position != "pre":
        raise GlassformerError(f"logit attribution needs a pre-norm causal LM; {model.arch} is "
                               "not one")


def _head_terms(z: np.ndarray, wo: np.ndarray) -> np.ndarray:
    """z (H, D) at one position, wo (H*D, C) -> each head's write into the stream, (H, C)."""
    h, d = z.shape
    return np.einsum("hd,hdc->hc", z.astype(np.float64),
                     wo.reshape(h, d, -1).astype(np.float64))


def residual_terms(model, cache, position: int, row: int = 0) -> tuple[list[str], np.ndarray]:
    """(labels, terms (n, C) float64): the last stream at `position` split into its writers."""
    labels, terms = ["embed"], [cache["hook_embed"][row, position]]
    if "hook_pos_embed" in cache:
        labels.append("pos_embed")
        terms.append(cache["hook_pos_embed"][row, position])
    for layer in range(model.cfg.n_layer):
        prefix = f"blocks.{layer}."
        heads = _head_terms(cache[prefix + "attn.hook_z"][row, position],
                            as_array(model.params[prefix + "attn.wo"]))
        labels += [f"L{layer}H{h}" for h in range(heads.shape[0])]
        terms += list(heads)
        if prefix + "attn.bo" in model.params:
            labels.append(f"L{layer} attn bias")
            terms.append(model.params[prefix + "attn.bo"])
        labels.append(f"L{layer} MLP")
        terms.append(cache[prefix + "hook_mlp_out"][row, position])
    return labels, np.stack([np.asarray(t, np.float64) for t in terms])


def logit_attribution(model, ids, target: int, other: int | None = None, *,
                      position: int = -1, max_cache_mb: float | None = None) -> Attribution:
    """Each head's, each MLP's and the embeddings' share of the logit of `target` (minus the
    logit of `other`) at `position` (default the last), through the final norm's scale; the
    shares sum to the forward's logit (difference)."""
    _check_decoder(model)
    ids = _ids(model, ids)
    names = ["hook_embed", "ln_final.hook_scale"] + (
        ["hook_pos_embed"] if "pos_emb" in model.params else [])
    for layer in range(model.cfg.n_layer):
        names += [f"blocks.{layer}.attn.hook_z", f"blocks.{layer}.hook_mlp_out"]
    logits, cache = run_with_cache(model, ids, names, max_cache_mb=max_cache_mb)
    labels, terms = residual_terms(model, cache, position)
    direction = unembed_direction(model, target, other)
    scale = float(cache["ln_final.hook_scale"][0, position, 0])                # 1 / rstd
    if model.cfg.block_config().norm == "layer":
        terms = terms - terms.mean(axis=1, keepdims=True)                      # centre each term
    values = terms @ (model.params["norm_f.w"].astype(np.float64) * direction) / scale
    if "norm_f.b" in model.params:
        labels.append("ln_final bias")
        values = np.append(values, float(model.params["norm_f.b"].astype(np.float64) @ direction))
    row = logits[0, position].astype(np.float64)
    logit = row[int(target)] - (0.0 if other is None else row[int(other)])
    return Attribution(labels, values, float(values.sum()), float(logit))


# ---------------------------------------------------------------- attribution patching

def stream_gradients(model, ids: np.ndarray, target: int, other: int | None,
                     position: int = -1) -> tuple[dict, object]:
    """One forward and glassformer's backward of the logit (difference) at `position`:
    ({"resid_pre": [L x (B, T, C)], "resid_mid": [...], "resid_post": [...]}, the forward's
    ctx). The gradient of each stream is read between the layers' backward steps."""
    logits, ctx = model.forward(ids)
    dlogits = np.zeros_like(logits)                                            # (B, T, V)
    dlogits[:, position, int(target)] = 1.0
    if other is not None:
        dlogits[:, position, int(other)] -= 1.0
    _, dx = head_backward(dlogits, ctx.head)                                   # (B, T, C)
    grads = {"resid_pre": [None] * model.cfg.n_layer, "resid_mid": [None] * model.cfg.n_layer,
             "resid_post": [None] * model.cfg.n_layer}
    for layer in reversed(range(model.cfg.n_layer)):
        block_ctx = ctx.blocks[layer]
        grads["resid_post"][layer] = dx
        _, dmid = mlp_sub_block_backward(dx, block_ctx)
        grads["resid_mid"][layer] = dmid
        _, dx, _ = block_backward(dx, block_ctx)
        grads["resid_pre"][layer] = dx
    return grads, ctx


def attribution_patch(model, clean_ids, corrupt_ids, target: int, other: int | None = None,
                      kinds=("resid_pre", "attn_out", "mlp_out", "z")) -> Patching:
    """The first-order estimate of `patch`'s result for the metric logit[target] -
    logit[other] at the last position: each table holds the corrupted run's metric plus the
    estimated change, layers x positions (z: layers x heads), as patch's tables do."""
    _check_decoder(model)
    clean_ids, corrupt_ids = _ids(model, clean_ids), _ids(model, corrupt_ids)
    check_same_length(clean_ids, corrupt_ids)
    kinds = [k[len("hook_"):] if k.startswith("hook_") else k for k in kinds]
    names = [hook_name(kind, layer) for layer in range(model.cfg.n_layer) for kind in kinds]
    clean_logits, clean = run_with_cache(model, clean_ids, names)
    corrupt_logits, corrupt = run_with_cache(model, corrupt_ids, names)
    metric = logit_diff_metric(target, other)
    base = float(metric(corrupt_logits))
    grads, _ = stream_gradients(model, corrupt_ids, target, other)
    # what each hook writes joins the stream: its gradient is the stream's just after it
    stream_of = {"resid_pre": "resid_pre", "attn_out": "resid_mid", "mlp_out": "resid_post",
                 "resid_mid": "resid_mid", "resid_post": "resid_post"}
    tables = {}
    for kind in kinds:
        rows = []
        for layer in range(model.cfg.n_layer):
            name = hook_name(kind, layer)
            delta = (clean[name] - corrupt[name]).astype(np.float64)
            if kind == "z":
                wo = as_array(model.params[f"blocks.{layer}.attn.wo"]).astype(np.float64)
                dz = grads["resid_mid"][layer] @ wo.T                          # (B, T, H*D)
                dz = dz.reshape(delta.shape)                                   # (B, T, H, D)
                rows.append((delta * dz).sum(axis=(0, 1, 3)))                  # (H,)
            else:
                rows.append((delta * grads[stream_of[kind]][layer]).sum(axis=(0, 2)))  # (T,)
        tables[kind] = PatchTable(kind, base + np.array(rows),
                                  "head" if kind == "z" else "position")
    return Patching(tables, float(metric(clean_logits)), base)
