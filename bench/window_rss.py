"""Decode memory past the window, measured: peak RSS of `generate` at 4k and 16k total tokens.

A tiny Mistral-shaped model (L=2, 4 query / 4 KV heads of D=32, C=64, V=64, T_max=16,384) with
a sliding window of W=256 in every layer, beside the same model with full attention everywhere.
Each (model, length) runs in a fresh Python process (`--child`): an 8-token prompt, greedy
`generate` to 4,096 or 16,384 tokens in all, then `resource.getrusage(...).ru_maxrss`, the
process's peak resident memory. A windowed layer keeps a ring of W positions
(blocks/kv_cache.py), so its peak should not move from 4k to 16k; a full layer keeps every
position, 2 KiB per token here (L x 2 x K x D x 4 bytes), so its peak grows by ~24 MiB.

Also measured, not computed: a Gated DeltaNet model's (Qwen3.5-shaped, linear layers only)
`HybridCache` after a prefill of 1,024 and of 32,768 tokens (`model.forward` with the cache,
as generate's prefill: generate itself wants a full-attention layer in a reused cache): the bytes its arrays hold
(`HybridCache.nbytes`, the sum of every array's .nbytes) per row, equal at both lengths.

    python bench/window_rss.py [--lengths 4096 16384]

Last line: one JSON object. The windowed model's 16k run takes well under a minute on an idle
core; the full model's is slower (it reads every key at every step).
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

WINDOW = 256
PROMPT = 8
SHAPE = dict(vocab_size=64, n_layer=2, n_head=4, n_kv_head=4, head_dim=32, d_model=64,
             d_ff=64, max_seq_len=16384)
DELTA_SHAPE = dict(vocab_size=64, n_layer=2, full_layers=(), d_model=32, d_ff=32,
                   linear_k_heads=2, linear_v_heads=4, linear_k_head_dim=8,
                   linear_v_head_dim=8, max_seq_len=32768)
DELTA_LENGTHS = (1024, 32768)


def tiny_model(kind: str):
    """The bench's model: 'windowed' (W=256 in every layer) or 'full' (no window)."""
    from glassformer.models import llama
    from glassformer.models.model import Model
    cfg = llama.LlamaConfig(**SHAPE, sliding_window=WINDOW if kind == "windowed" else None)
    return Model(cfg, llama.init_params(cfg, np.random.default_rng(0)))


def child(kind: str, tokens: int) -> dict:
    """Generate greedily to `tokens` in all; this process's peak RSS (bytes) afterwards."""
    from glassformer.generate.generate import generate
    model = tiny_model(kind)
    start = time.perf_counter()
    for _ in generate(model, np.zeros((1, PROMPT), np.int64), max_new_tokens=tokens - PROMPT,
                      temperature=0.0):
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024   # Linux: KiB
    return {"kind": kind, "tokens": tokens, "peak_rss": peak,
            "cache_bytes": model.cache_bytes(1, tokens, ring=True),
            "seconds": round(time.perf_counter() - start, 2)}


def run_child(kind: str, tokens: int) -> dict:
    """`child` in a fresh interpreter, so no run's peak carries into another's."""
    out = subprocess.run([sys.executable, __file__, "--child", kind, str(tokens)],
                         capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[1])
    return json.loads(out.stdout.strip().splitlines()[-1])


def peak_rss_ratio(kind: str, lengths: tuple[int, int]) -> dict:
    """Peak RSS at the longer length over the shorter one, each in its own process."""
    short, long = (run_child(kind, n) for n in lengths)
    return {"short": short, "long": long, "ratio": long["peak_rss"] / short["peak_rss"]}


def delta_state_bytes(lengths=DELTA_LENGTHS) -> dict:
    """Bytes a linear-only Qwen3.5-shaped model's HybridCache holds per row after a prefill of
    each length (the arrays' own .nbytes after the run, not the layout's arithmetic)."""
    from glassformer.models import qwen3_next
    from glassformer.models.model import Model
    from glassformer.models.qwen3_5 import Qwen35Config
    cfg = Qwen35Config(**DELTA_SHAPE)
    model = Model(cfg, qwen3_next.init_params(cfg, np.random.default_rng(0)))
    measured = {}
    for n in lengths:
        cache = model.new_cache(1, n)
        ids = np.random.default_rng(n).integers(0, cfg.vocab_size, (1, n))
        model.forward(ids, kv_cache=cache, last_only=True)   # generate's prefill, by hand
        cache.advance(n)
        assert all(s.recurrent.any() for s in cache.states.values())   # the state was written
        measured[n] = cache.nbytes()
    return measured


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs=2, default=(4096, 16384))
    parser.add_argument("--child", nargs=2, metavar=("KIND", "TOKENS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child[0], int(args.child[1]))))
        return
    lengths = tuple(args.lengths)
    result = {"window": WINDOW, "lengths": list(lengths)}
    print(f"{'model':<9} {'tokens':>7} {'peak RSS MiB':>13} {'cache MiB':>10} {'s':>7}")
    for kind in ("windowed", "full"):
        row = peak_rss_ratio(kind, lengths)
        for run in (row["short"], row["long"]):
            print(f"{kind:<9} {run['tokens']:>7,} {run['peak_rss'] / 2**20:>13.1f} "
                  f"{run['cache_bytes'] / 2**20:>10.2f} {run['seconds']:>7.1f}")
        print(f"{kind:<9} peak RSS {lengths[1]:,} / {lengths[0]:,}: {row['ratio']:.3f}")
        result[kind] = {"ratio": round(row["ratio"], 4),
                        "peak_rss": [row["short"]["peak_rss"], row["long"]["peak_rss"]],
                        "cache_bytes": [row["short"]["cache_bytes"], row["long"]["cache_bytes"]]}
    measured = delta_state_bytes()
    print("gated-delta state bytes per row (HybridCache.nbytes after the prefill): " +
          ", ".join(f"{n:,} tokens: {b:,}" for n, b in measured.items()))
    result["gated_delta_state_bytes"] = {str(n): b for n, b in measured.items()}
    print(json.dumps(result))


if __name__ == "__main__":
    main()
