"""Hook points with TransformerLens's names, read off a forward's ctx.

glassformer's forward already keeps every intermediate a backward needs in its ctx, so a hook
that only *reads* costs nothing in the forward: after each layer, `layer_values` reads the
requested names off that layer's ctx (models/common.py's on_layer), from the same arrays the
forward computed (or, for the few the ctx does not keep, the same product recomputed from the
inputs it does keep). Changing a value mid-forward is blocks/hooks.py's.

    name                              shape             what
    hook_embed                        (B, T, C)         tok_emb[ids]
    hook_pos_embed                    (B, T, C)         pos_emb[positions] (learned positions)
    blocks.{l}.hook_resid_pre         (B, T, C)         the stream entering layer l
    blocks.{l}.ln1.hook_scale         (B, T, 1)         1 / rstd of the first norm
    blocks.{l}.ln1.hook_normalized    (B, T, C)         its x-hat (before the scale)
    blocks.{l}.attn.hook_q/k/v        (B, T, H|K, D)    per head, before RoPE
    blocks.{l}.attn.hook_rot_q/rot_k  (B, T, H|K, D)    after RoPE (RoPE models)
    blocks.{l}.attn.hook_attn_scores  (B, H, T, S)      q k^T * scale, -inf where masked
    blocks.{l}.attn.hook_pattern      (B, H, T, S)      the softmax weights
    blocks.{l}.attn.hook_z            (B, T, H, D)      the heads' outputs, before wo
    blocks.{l}.attn.hook_latent       (B, T, R)         MLA: the normalised KV latent
    blocks.{l}.hook_attn_out          (B, T, C)         what attention adds to the stream
    blocks.{l}.hook_resid_mid         (B, T, C)         the stream between attention and MLP
    blocks.{l}.ln2.hook_scale/normalized                the second norm's
    blocks.{l}.mlp.hook_pre           (B, T, F)         pre-activation (the gate, SwiGLU)
    blocks.{l}.mlp.hook_pre_linear    (B, T, F)         SwiGLU's up branch
    blocks.{l}.mlp.hook_post          (B, T, F)         the activation, what w_down reads
    blocks.{l}.mlp.hook_router_logits (B, T, E)         MoE layers: router logits
    blocks.{l}.mlp.hook_expert_indices/weights (B, T, k) MoE: chosen experts and their weights
    blocks.{l}.hook_mlp_out           (B, T, C)         what the MLP adds to the stream
    blocks.{l}.hook_resid_post        (B, T, C)         the stream leaving layer l
    ln_final.hook_scale/normalized                      the final norm's (causal LMs)

Values are the unprocessed model's (no weight folding, no centering): TransformerLens's with
fold_ln=False, and what transformers computes.
"""
from __future__ import annotations

import difflib

import numpy as np

from glassformer.blocks.attention import AttentionBlockCtx, head_weights, merged_heads
from glassformer.blocks.hooks import heads_view
from glassformer.blocks.mla import MLACtx
from glassformer.blocks.moe import MoECtx, chosen_experts, chosen_weights, router_logits
from glassformer.blocks.residual import BlockCtx, sparse_layer, sub_block_outputs
from glassformer.errors import GlassformerError
from glassformer.ops.linear import linear_forward
from glassformer.ops.rope import rope_forward

# the points where a function may return a replacement (blocks/hooks.py's run_hook); the
# attention's own are blocks/attention.py's (not MLA's), the embeddings' a causal family's
REPLACEABLE = ("hook_resid_pre", "hook_resid_mid", "hook_resid_post", "hook_attn_out",
               "hook_mlp_out", "attn.hook_q", "attn.hook_k", "attn.hook_v", "attn.hook_z")
EMBEDDINGS = ("hook_embed", "hook_pos_embed")


def replaceable(model, name: str) -> bool:
    """Whether the forward calls run_hook at `name`, so that a function there may replace it."""
    layer, local = split_name(name)
    if layer is None:
        return name in EMBEDDINGS and "norm_f.w" in model.params   # GPT-2's and LLaMA's forward
    if local.startswith("attn."):
        return local in REPLACEABLE and model.cfg.block_config().mla is None
    return local in REPLACEABLE


def layer_shapes(bcfg, layer: int, b: int, t: int) -> dict[str, tuple[int, ...]]:
    """{local name: shape} of layer `layer`'s hook points for a (B, T) input."""
    c, h, d, kv = bcfg.d_model, bcfg.n_head, bcfg.dim_per_head, bcfg.kv_heads
    shapes = {"hook_resid_pre": (b, t, c), "ln1.hook_scale": (b, t, 1),
              "ln1.hook_normalized": (b, t, c)}
    if bcfg.mla is None:
        shapes.update({"attn.hook_q": (b, t, h, d), "attn.hook_k": (b, t, kv, d),
                       "attn.hook_v": (b, t, kv, d)})
        if bcfg.position == "rope":
            shapes.update({"attn.hook_rot_q": (b, t, h, d), "attn.hook_rot_k": (b, t, kv, d)})
        shapes["attn.hook_z"] = (b, t, h, d)
    else:
        shapes["attn.hook_latent"] = (b, t, bcfg.mla.kv_lora_rank)
        shapes["attn.hook_z"] = (b, t, h, bcfg.mla.v_head_dim)
    shapes.update({"attn.hook_attn_scores": (b, h, t, t), "attn.hook_pattern": (b, h, t, t),
                   "hook_attn_out": (b, t, c), "hook_resid_mid": (b, t, c),
                   "ln2.hook_scale": (b, t, 1), "ln2.hook_normalized": (b, t, c)})
    if sparse_layer(bcfg, layer):
        k = bcfg.moe.experts_per_token
        shapes.update({"mlp.hook_router_logits": (b, t, bcfg.moe.n_experts),
                       "mlp.hook_expert_indices": (b, t, k), "mlp.hook_expert_weights": (b, t, k)})
    else:
        f = bcfg.hidden
        shapes["mlp.hook_pre"] = (b, t, f)
        if bcfg.mlp == "swiglu":
            shapes["mlp.hook_pre_linear"] = (b, t, f)
        shapes["mlp.hook_post"] = (b, t, f)
    shapes.update({"hook_mlp_out": (b, t, c), "hook_resid_post": (b, t, c)})
    return shapes


def hook_shapes(model, b: int = 1, t: int = 1) -> dict[str, tuple[int, ...]]:
    """{hook name: shape} of every hook point of `model` for a (B, T) input, in forward order."""
    bcfg = model.cfg.block_config()
    c = bcfg.d_model
    shapes = {"hook_embed": (b, t, c)}
    if "pos_emb" in model.params:
        shapes["hook_pos_embed"] = (b, t, c)
    for i in range(model.cfg.n_layer):
        shapes.update({f"blocks.{i}.{k}": v for k, v in layer_shapes(bcfg, i, b, t).items()})
    if "norm_f.w" in model.params:
        shapes.update({"ln_final.hook_scale": (b, t, 1), "ln_final.hook_normalized": (b, t, c)})
    return shapes


def check_names(names, known) -> list[str]:
    """The names, each one of `known`; an unknown one is one line listing the nearest names."""
    names = [names] if isinstance(names, str) else list(names)
    for name in names:
        if name not in known:
            near = difflib.get_close_matches(name, list(known), n=5, cutoff=0.5)
            hint = ", ".join(near) if near else ", ".join(list(known)[:6]) + ", ..."
            raise GlassformerError(f"unknown hook name {name!r}; near names: {hint}")
    return names


def split_name(name: str) -> tuple[int | None, str]:
    """'blocks.3.attn.hook_z' -> (3, 'attn.hook_z'); 'hook_embed' -> (None, 'hook_embed')."""
    if not name.startswith("blocks."):
        return None, name
    layer, _, local = name[len("blocks."):].partition(".")
    return int(layer), local


# ---------------------------------------------------------------- reading one layer's ctx

def _unrotate(x: np.ndarray, rope) -> np.ndarray:
    """Undo RoPE: the rotation by -angle (x (B, n, T, D) after RoPE -> before)."""
    if rope is None:
        return x
    back, _ = rope_forward(x, rope.cos, -rope.sin)
    return back


def _query_heads(body: AttentionBlockCtx) -> np.ndarray:
    """The queries after RoPE, (B, K, G, T, D) -> (B, H, T, D)."""
    q = body.attn.q
    b, k, g, t, d = q.shape
    return q.reshape(b, k * g, t, d)


def _scores(attn) -> np.ndarray:
    """q k^T * scale (+ bias), -inf where a key was not allowed: (B, H, T, S), recomputed from the
    q, k the attention op kept (grouped (B, K, G, T, D) against (B, K, 1, S, D))."""
    scores = np.matmul(attn.q, np.swapaxes(attn.k, -1, -2)) * attn.scale
    if attn.bias is not None:
        scores = scores + attn.bias
    if attn.allowed is not None:
        scores = np.where(attn.allowed, scores, -np.inf).astype(scores.dtype)
    lead = scores.shape[:-2]
    b, t, s = lead[0], scores.shape[-2], scores.shape[-1]
    return scores.reshape(b, -1, t, s)


def _attention_values(body, local: str) -> np.ndarray:
    """One attention hook's value from the attention block's ctx."""
    if local == "attn.hook_pattern":
        if isinstance(body, MLACtx):
            return body.attn.softmax.probs
        return head_weights(body)
    if local == "attn.hook_attn_scores":
        return _scores(body.attn)
    if local == "attn.hook_z":
        z = merged_heads(body) if not isinstance(body, MLACtx) else body.out_proj.x
        b, t, _ = z.shape
        h = body.n_head if not isinstance(body, MLACtx) else body.attn.q.shape[1]
        return z.reshape(b, t, h, -1)                                    # (B, T, H, D)
    if local == "attn.hook_latent":
        return body.kv_b.x                                               # (B, T, R)
    if local in ("attn.hook_q", "attn.hook_rot_q"):
        q = _query_heads(body)
        return heads_view(q if local == "attn.hook_rot_q" else _unrotate(q, body.q_rope))
    k = body.attn.k[:, :, 0] if local.endswith("k") else body.attn.v[:, :, 0]   # (B, K, S, D)
    if local == "attn.hook_k":
        k = _unrotate(k, body.k_rope)
    return heads_view(k)


def _mlp_values(body, local: str, params: dict) -> np.ndarray:
    """One MLP hook's value from the MLP block's ctx (dense or mixture of experts)."""
    if isinstance(body, MoECtx):
        b, t, _ = body.shape
        value = {"mlp.hook_router_logits": router_logits, "mlp.hook_expert_indices":
                 chosen_experts, "mlp.hook_expert_weights": chosen_weights}[local](body)
        return value.reshape(b, t, -1)                                   # (N, .) -> (B, T, .)
    if local == "mlp.hook_post":
        return body.down.x
    if body.kind == "swiglu":
        return body.act.silu.x if local == "mlp.hook_pre" else body.act.up
    # GELU keeps only its slope: the pre-activation is the up product again, from its saved input
    pre, _ = linear_forward(body.up.x, body.up.w, params.get("mlp.b_up"))
    return pre


def _norm_values(norm_ctx, local: str) -> np.ndarray:
    inner = norm_ctx.inner
    return inner.xhat if local.endswith("hook_normalized") else 1.0 / inner.rstd


def layer_values(ctx: BlockCtx, x_in: np.ndarray, x_out: np.ndarray, params: dict,
                 locals_wanted) -> dict[str, np.ndarray]:
    """{local name: value} of one layer, read off its ctx and the streams entering and leaving
    it. params: the layer's own (block-local names), for the biases a LinearCtx does not keep."""
    out, sums = {}, None
    for local in locals_wanted:
        if local == "hook_resid_pre":
            out[local] = x_in
        elif local == "hook_resid_post":
            out[local] = x_out
        elif local in ("hook_attn_out", "hook_mlp_out", "hook_resid_mid"):
            if sums is None:
                sums = sub_block_outputs(ctx, params)                     # (a, m)
            a, m = sums
            if local == "hook_resid_mid":
                # pre-norm: the same sum block_forward made; post-norm: the stream minus the MLP
                # would not be exact, so read what the MLP's first product kept
                out[local] = x_in + a if ctx.norm_position == "pre" else _post_norm_mid(ctx)
            else:
                out[local] = a if local == "hook_attn_out" else m
        elif local.startswith("ln1.") or local.startswith("ln2."):
            out[local] = _norm_values((ctx.attn if local.startswith("ln1.") else ctx.mlp).norm,
                                      local)
        elif local.startswith("attn."):
            out[local] = _attention_values(ctx.attn.body, local)
        elif local.startswith("mlp."):
            out[local] = _mlp_values(ctx.mlp.body, local, params)
        else:
            raise GlassformerError(f"no reader for hook point {local!r}")
    return out


def _post_norm_mid(ctx: BlockCtx) -> np.ndarray:
    """A post-norm layer's stream between attention and MLP: the MLP's input, which its first
    projection kept."""
    return ctx.mlp.body.up.x
