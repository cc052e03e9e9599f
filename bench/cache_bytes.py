"""KV cache bytes per row of windowed models beside the same model with full attention everywhere.

Two shapes, float32, batch 1, at 1k, 8k and 32k positions:

    gemma3-5:1   Gemma 3 1B's widths (K=1 KV head, D=256) with an exact 5:1 pattern: 24 layers,
                 every sixth global, the others a window of W=512
    gemma3-1b    Gemma 3 1B's own 26 layers (layer_types: globals at 5, 11, 17, 23), W=512
    gpt-oss-20b  24 layers alternating windowed (W=128) and full, K=8, D=64

glassformer's figure is `KVCache.bytes_for(layout, windows=...)`, what `Model.cache_bytes(...,
ring=True)` asks before generate allocates its ring caches (blocks/kv_cache.py); the reference is
the arithmetic written out here, layer by layer: min(context, W) positions for a windowed layer,
context for a global one, times K (D + D) floats of 4 bytes. Their ratio must be 1; the share of
full attention is the saving. No model runs and no weights are made.

    python bench/cache_bytes.py

Last line: one JSON object.
"""
from __future__ import annotations

import json

from glassformer.blocks.kv_cache import KVCache, KVLayout
from glassformer.models import gemma3, gpt_oss, llama

CONTEXTS = (1024, 8192, 32768)
GEMMA = dict(vocab_size=262144, n_head=4, n_kv_head=1, d_model=1152, head_dim=256,
             d_ff=6912, max_seq_len=32768, sliding_window=512)
SHAPES = {
    "gemma3-5:1": gemma3.Gemma3Config(**GEMMA, n_layer=24,
                                      full_layers=tuple(range(5, 24, 6))),
    "gemma3-1b": gemma3.Gemma3Config(**GEMMA, n_layer=26, full_layers=tuple(range(5, 26, 6))),
    "gpt-oss-20b": gpt_oss.GptOssConfig(vocab_size=201088, n_layer=24, n_head=64, n_kv_head=8,
                                        d_model=2880, head_dim=64, d_ff=2880, n_experts=32,
                                        experts_per_token=4, max_seq_len=32768,
                                        sliding_window=128, full_layers=tuple(range(1, 24, 2))),
}


def by_hand(cfg, context: int, windowed: bool) -> int:
    """The reference: bytes summed layer by layer, as written in the module docstring."""
    bcfg = cfg.block_config()
    per_position = bcfg.kv_heads * 2 * bcfg.dim_per_head * 4        # K (D + D) float32
    total = 0
    for layer in range(cfg.n_layer):
        window = bcfg.window_at(layer) if windowed else None
        total += (context if window is None else min(context, window)) * per_position
    return total


def main() -> None:
    rows = {}
    print(f"{'shape':<12} {'context':>8} {'windowed':>14} {'full':>14} {'share':>7} "
          f"{'vs by hand':>10}")
    for name, cfg in SHAPES.items():
        layout: KVLayout = llama.kv_layout(cfg)
        windows = llama.layer_windows(cfg)
        for context in CONTEXTS:
            ours = KVCache.bytes_for(layout, layers=cfg.n_layer, rows=1, context=context,
                                     windows=windows)
            full = KVCache.bytes_for(layout, layers=cfg.n_layer, rows=1, context=context)
            ratio = ours / by_hand(cfg, context, True)
            assert full == by_hand(cfg, context, False)
            rows[f"{name}@{context}"] = {"windowed": ours, "full": full,
                                         "share": round(ours / full, 4), "vs_by_hand": ratio}
            print(f"{name:<12} {context:>8} {ours:>14,} {full:>14,} {ours / full:>7.1%} "
                  f"{ratio:>10.3f}")
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
