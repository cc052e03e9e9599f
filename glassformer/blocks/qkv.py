"""An attention block's q, k, v projections: one joined product or three, and their LoRA adapters.

    x (B, T, C) --wq--> q (B, T, H*D)        queries always read x
    src (B, S, C) --wk--> k (B, S, K*D)      src: x in self-attention, memory in cross-attention
    src (B, S, C) --wv--> v (B, S, K*D)

Self-attention over several tokens (training, eval, a prompt, with or without a KV cache)
projects q, k and v in one product, x @ [wq | wk | wv], as GPT-2's c_attn does: one
(C, (H + 2K) D) product runs faster than three narrow ones (fewer, larger BLAS calls, which split
better over threads), and its backward is one dx and one dW product instead of three each.
Decoding one token at a time keeps three products, because joining the weights would copy them
once per generated token, more bytes than the product itself reads, unless they lie packed side
by side already (blocks/packed.py; models/layout.py packs a loaded model's, GGUF blocks
included: their rows stacked). Same numbers.

A projection whose params hold a LoRA adapter ("wq.lora_A", ...: blocks/lora.py) adds it. In the
joined product the base runs frozen and each adapter adds its delta to its slice of the output;
the three separate products run through blocks/projection.py, which applies each weight's own.
GPT-2's fused c_attn has one adapter over all three ("wqkv.lora_A" (C, r), "wqkv.lora_B"
(r, (H+2K) D)), which only the joined product can apply: the other paths refuse it (merge it
first for decoding: io/peft.py).

`qkv_forward` returns the projections before the heads are split (QK-norm's "proj" form reads
them so: blocks/attention.py); `qkv_backward` takes the heads' grads and merges them back.
"""
from __future__ import annotations

import numpy as np

from glassformer.blocks.config import BlockConfig
from glassformer.blocks.heads import merge_heads, split_heads
from glassformer.blocks.lora import LORA_A, LORA_B, adapter_name, adapter_of
from glassformer.blocks.packed import packed_whole
from glassformer.blocks.projection import projection_backward, projection_forward
from glassformer.errors import GlassformerError
from glassformer.ops.linear import LinearCtx, linear_backward, linear_forward
from glassformer.ops.lora import LoraCtx, LoraLinearCtx, lora_delta_backward, lora_delta_forward

# (qkv, q, k, v): the joined product's ctx, or the three separate ones' (the others None)
Projections = tuple[LinearCtx | None, LinearCtx | LoraLinearCtx | None,
                    LinearCtx | LoraLinearCtx | None, LinearCtx | LoraLinearCtx | None]


def _joined(params: dict, several_tokens: bool
            ) -> tuple[np.ndarray, np.ndarray | None] | None:
    """([wq | wk | wv] (C, (H+2K) D), [bq | bk | bv] ((H+2K) D,) or None without biases) for one
    joined product, or None for three products. No copy when they lie packed
    (blocks/packed.py); joined by a copy only for several tokens (see the module docstring)."""
    weights = [params["wq"], params["wk"], params["wv"]]
    biases = [params["bq"], params["bk"], params["bv"]] if "bq" in params else None
    w = packed_whole(weights)            # the array they lie packed in, or None
    b = None if biases is None else packed_whole(biases)
    if w is not None and (biases is None or b is not None):
        return w, b
    if not several_tokens or not all(isinstance(w, np.ndarray) for w in weights):
        return None           # one token, or unpacked quantized weights: three products
    if w is None:
        w = np.concatenate(weights, axis=-1)                                # (C, (H+2K) D)
    if biases is not None and b is None:
        b = np.concatenate(biases, axis=-1)                                 # ((H+2K) D,)
    return w, b


def _slices(widths: tuple[int, int, int]) -> list[tuple[str, int, int]]:
    """(name, first column, end column) of q, k, v and the whole of the joined output, given the
    widths (H*D, K*D, K*D): where each one's adapter adds its delta."""
    width_q, width_k, width_v = widths
    end = width_q + width_k + width_v
    return [("q", 0, width_q), ("k", width_q, width_q + width_k),
            ("v", width_q + width_k, end), ("qkv", 0, end)]


def qkv_forward(params: dict, x: np.ndarray, memory: np.ndarray | None, *, frozen: bool,
                train: bool, rng: np.random.Generator | None):
    """The q, k, v projections of x (B, T, C), keys and values of memory (B, S, C) when given:
    ((q_lin (B, T, H*D), k_lin, v_lin (B, S, K*D)), their ctxs (qkv, q, k, v), the joined
    product's adapters ({"q"/"k"/"v"/"qkv": LoraCtx}, {} when none, None when not joined)).
    frozen: the base weights take no gradient (a LoRA model). train, rng: LoRA dropout only."""
    joined = None if memory is not None else _joined(params, several_tokens=x.shape[1] > 1)
    if joined is not None:
        qkv, qkv_proj = linear_forward(x, *joined, frozen=frozen)          # (B, T, (H+2K) D)
        width_q, width_kv = params["wq"].shape[1], params["wk"].shape[1]
        adapters = {}
        for name, lo, hi in _slices((width_q, width_kv, width_kv)):
            adapter = adapter_of(params, f"w{name}")
            if adapter is not None:  # LoRA: the base is frozen, the adapter adds to its slice
                delta, adapters[name] = lora_delta_forward(
                    x, adapter.a, adapter.b, scale=adapter.scale, dropout=adapter.dropout,
                    train=train, rng=rng)                                   # (B, T, hi - lo)
                qkv[..., lo:hi] += delta
        q_lin, k_lin = qkv[..., :width_q], qkv[..., width_q:width_q + width_kv]     # views
        v_lin = qkv[..., width_q + width_kv:]
        return (q_lin, k_lin, v_lin), (qkv_proj, None, None, None), adapters
    if adapter_of(params, "wqkv") is not None:
        raise GlassformerError("a fused q|k|v LoRA adapter (GPT-2's c_attn) applies to "
                               "self-attention over 2 or more tokens only; merge it into the "
                               "weights to decode (glassformer.load_pretrained(..., adapter=...))")
    source = x if memory is None else memory
    options = dict(frozen=frozen, train=train, rng=rng)
    q_lin, q_proj = projection_forward(params, "wq", "bq", x, **options)       # (B, T, H*D)
    k_lin, k_proj = projection_forward(params, "wk", "bk", source, **options)  # (B, S, K*D)
    v_lin, v_proj = projection_forward(params, "wv", "bv", source, **options)  # (B, S, K*D)
    return (q_lin, k_lin, v_lin), (None, q_proj, k_proj, v_proj), None


def qkv_backward(dq: np.ndarray, dk: np.ndarray, dv: np.ndarray, projections: Projections,
                 adapters: dict | None) -> tuple[dict, np.ndarray, np.ndarray | None]:
    """Grads of wq, wk, wv (and biases, or their adapters), d(query input) and d(key/value
    source), given what `qkv_forward` returned as projections and adapters.

    dq (B, H, T, D), dk and dv (B, K, S, D): the heads are merged back as they are copied.
    dsource is None for the joined product: x fed all three projections, and the joined
    product's dx = dqkv @ [wq | wk | wv]^T already sums the three paths."""
    qkv_proj, q_proj, k_proj, v_proj = projections
    grads = {}
    if qkv_proj is not None:
        b, n_head, t, d = dq.shape
        n_kv = dk.shape[1]
        dqkv = np.empty((b, t, (n_head + 2 * n_kv) * d), dq.dtype)        # (B, T, (H+2K) D)
        bounds = np.cumsum([0, n_head * d, n_kv * d, n_kv * d])
        for lo, hi, grad in zip(bounds[:-1], bounds[1:], (dq, dk, dv)):
            heads = grad.shape[1]
            # merge heads into this slice: (B, n, T, D) -> (B, T, n, D), written in place
            dqkv[..., lo:hi].reshape(b, t, heads, d)[...] = grad.transpose(0, 2, 1, 3)
        dx, dw, db = linear_backward(dqkv, qkv_proj)   # dw, db None when frozen
        for name, lo, hi in _slices((n_head * d, n_kv * d, n_kv * d)):
            if dw is not None and name != "qkv":
                # (C, n*D) column block, copied whole: the optimizer then reads contiguous rows
                grads[f"w{name}"] = np.ascontiguousarray(dw[:, lo:hi])
            if db is not None and name != "qkv":
                grads[f"b{name}"] = db[lo:hi]
            if name in adapters:
                adapter: LoraCtx = adapters[name]
                dx_adapter, da, db_adapter = lora_delta_backward(dqkv[..., lo:hi], adapter)
                grads[adapter_name(f"w{name}", LORA_A)] = da
                grads[adapter_name(f"w{name}", LORA_B)] = db_adapter
                dx = dx + dx_adapter  # fan-out: x fed the frozen product and this adapter
        return grads, dx, None
    dsrc_k, k_grads, dbk = projection_backward(merge_heads(dk), k_proj, "wk")
    dsrc_v, v_grads, dbv = projection_backward(merge_heads(dv), v_proj, "wv")
    dx, q_grads, dbq = projection_backward(merge_heads(dq), q_proj, "wq")
    grads.update({**k_grads, **v_grads, **q_grads})
    for name, db in (("bq", dbq), ("bk", dbk), ("bv", dbv)):
        if db is not None:
            grads[name] = db
    dsource = dsrc_k + dsrc_v  # fan-out: the source fed both the key and the value projection
    return grads, dx, dsource


def cross_kv(params: dict, memory: np.ndarray, cfg: BlockConfig
             ) -> tuple[np.ndarray, np.ndarray]:
    """A cross-attention block's keys and values of an encoder output, for decoding: memory
    (B, S, C) -> k, v (B, K, S, D). Computed once per source; every decoding step then passes
    them as `memory_kv` instead of projecting memory again. Inference only (no ctx)."""
    k_lin, _ = linear_forward(memory, params["wk"], params.get("bk"))       # (B, S, K*D)
    v_lin, _ = linear_forward(memory, params["wv"], params.get("bv"))       # (B, S, K*D)
    return split_heads(k_lin, cfg.kv_heads), split_heads(v_lin, cfg.kv_heads)
