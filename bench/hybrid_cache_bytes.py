"""Decoding-cache bytes per row of a Qwen3.5-shaped hybrid against the same model with full
attention in every layer, at several contexts; by arithmetic (`HybridCache.hybrid_bytes`,
`KVCache.bytes_for`), nothing allocated, checked against transformers' own cache for a small
context.

The shape is transformers' `Qwen3_5TextConfig` defaults (C=4096, L=32, one full-attention layer in
4, 16 query / 4 KV heads of 256, Gated DeltaNet with 16 key / 32 value heads of 128, conv 4).
A linear layer keeps (W-1) x Dc conv inputs and Hv x Dk x Dv state numbers per row whatever the
context; a full layer keeps 2 x K x D numbers per token.

    python bench/hybrid_cache_bytes.py [--contexts 1024 8192 32768] [--dtype-bytes 2]

Last line: one JSON object. The transformers check (a DynamicCache filled by a tiny random
Qwen3_5ForCausalLM of the same layer pattern) runs when torch and transformers are installed.
"""
from __future__ import annotations

import argparse
import json

import numpy as np

from glassformer.blocks.delta_state import HybridCache
from glassformer.blocks.kv_cache import KVCache
from glassformer.models import qwen3_next
from glassformer.models.qwen3_5 import Qwen35Config

QWEN35 = dict(vocab_size=248320, max_seq_len=262144, n_layer=32, n_head=16, n_kv_head=4,
              d_model=4096, head_dim=256, d_ff=12288, full_layers=tuple(range(3, 32, 4)),
              linear_k_heads=16, linear_v_heads=32, linear_k_head_dim=128,
              linear_v_head_dim=128, conv_width=4)


def bytes_per_row(cfg, context: int, dtype) -> tuple[int, int]:
    """(hybrid, all-full-attention) bytes of one row's cache at `context` tokens."""
    kv, state = qwen3_next.kv_layout(cfg), qwen3_next.state_layout(cfg)
    hybrid = HybridCache.hybrid_bytes(kv, state, cfg.layer_types(), rows=1, context=context,
                                      dtype=dtype)
    full = KVCache.bytes_for(kv, layers=cfg.n_layer, rows=1, context=context, dtype=dtype)
    return hybrid, full


def transformers_check() -> dict | None:
    """Our count against the arrays transformers' cache holds after a prompt, tiny model."""
    try:
        import torch
        import transformers
    except ImportError:
        return None
    cfg = Qwen35Config(n_layer=4, full_layers=(3,), vocab_size=64, d_model=32, head_dim=8,
                       n_head=4, n_kv_head=2, linear_k_heads=2, linear_v_heads=4,
                       linear_k_head_dim=8, linear_v_head_dim=8)
    hf = transformers.Qwen3_5ForCausalLM(transformers.Qwen3_5TextConfig(
        vocab_size=64, hidden_size=32, intermediate_size=cfg.d_ff, num_hidden_layers=4,
        num_attention_heads=4, num_key_value_heads=2, head_dim=8, linear_num_key_heads=2,
        linear_num_value_heads=4, linear_key_head_dim=8, linear_value_head_dim=8,
        layer_types=list(cfg.layer_types()))).eval()
    context = 40
    with torch.no_grad():
        out = hf(torch.zeros((1, context), dtype=torch.long), use_cache=True)
    tensors = [t for t in _tensors(out.past_key_values) if t is not None]
    theirs = sum(t.numel() * 4 for t in tensors)
    ours, _ = bytes_per_row(cfg, context, np.float32)
    return {"context": context, "ours": ours, "transformers": theirs,
            "note": "transformers keeps W (not W-1) conv inputs per linear layer"}


def _tensors(cache):
    """Every array a transformers 5 DynamicCache holds (states sit in per-index dicts)."""
    for layer in getattr(cache, "layers", []):
        for name in ("keys", "values", "conv_states", "recurrent_states"):
            value = getattr(layer, name, None)
            values = value.values() if isinstance(value, dict) else [value]
            yield from (v for v in values if hasattr(v, "numel"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--contexts", type=int, nargs="+", default=[1024, 8192, 32768])
    parser.add_argument("--dtype-bytes", type=int, choices=[2, 4], default=2)
    args = parser.parse_args()
    dtype = np.float16 if args.dtype_bytes == 2 else np.float32
    cfg = Qwen35Config(**QWEN35)
    rows = []
    print(f"{'context':>8} {'hybrid MiB':>11} {'full MiB':>10} {'hybrid / full':>14}")
    for context in args.contexts:
        hybrid, full = bytes_per_row(cfg, context, dtype)
        rows.append({"context": context, "hybrid_bytes": hybrid, "full_bytes": full,
                     "ratio": hybrid / full})
        print(f"{context:>8} {hybrid / 2**20:>11.1f} {full / 2**20:>10.1f} {hybrid / full:>14.3f}")
    state = qwen3_next.state_layout(cfg).floats_per_row() * args.dtype_bytes
    print(f"one linear layer's state: {state:,} bytes per row at any context")
    check = transformers_check()
    if check is not None:
        print(f"transformers' cache after {check['context']} tokens, tiny model: "
              f"{check['transformers']:,} bytes; ours {check['ours']:,} ({check['note']})")
    print(json.dumps({"shape": "Qwen3.5 text defaults", "dtype_bytes": args.dtype_bytes,
                      "rows": rows, "linear_state_bytes": state, "transformers_check": check}))


if __name__ == "__main__":
    main()
