"""Decoding with MLA's latent cache beside the same model with ordinary attention.

Three models of the same shape (C=512, L=4, H=8, F=1376, a 64-wide head, random weights):
DeepSeek-V3's multi-head latent attention (R=128, Dn=48, Dr=16, Dv=64, no q_lora_rank), and
LLaMA attention with 8 key/value heads (MHA) and with 2 (GQA). Each greedily generates
--new-tokens tokens after a --prompt-token prompt (default 32), batch 1, with its KV cache; the three run in turn,
--rounds times, so machine noise hits all of them, and the best round of each is kept.

    python bench/mla_decode.py [--new-tokens 256] [--prompt 32] [--rounds 3] [--context 1024]

Prints cache bytes per token (all layers, float32) and decoding tokens/s of each (the prompt's
prefill not counted), and the ratios to MHA.
Last line: one JSON object.
"""
from __future__ import annotations

import argparse
import json
import time

import numpy as np

from glassformer.blas import blas_threads, free_cores
from glassformer.generate.generate import generate
from glassformer.models import deepseek_v3, llama
from glassformer.models.model import Model

SHAPE = dict(vocab_size=512, n_layer=4, n_head=8, d_model=512, d_ff=1376)
MLA = dict(kv_lora_rank=128, qk_nope_head_dim=48, qk_rope_head_dim=16, v_head_dim=64)


def models(context: int) -> dict[str, Model]:
    rng = np.random.default_rng(0)
    configs = {
        "mla": deepseek_v3.DeepseekV3Config(**SHAPE, **MLA, max_seq_len=context),
        "mha": llama.LlamaConfig(**SHAPE, n_kv_head=8, head_dim=64, max_seq_len=context),
        "gqa": llama.LlamaConfig(**SHAPE, n_kv_head=2, head_dim=64, max_seq_len=context),
    }
    out = {}
    for name, cfg in configs.items():
        family = deepseek_v3.FAMILY if name == "mla" else llama.FAMILY
        out[name] = Model(cfg, family.init_params(cfg, rng))
    return out


def tokens_per_second(model: Model, ids: np.ndarray, new_tokens: int) -> float:
    """Decoding speed: the tokens after the first, whose time also holds the prompt's prefill."""
    tokens = generate(model, ids, max_new_tokens=new_tokens, temperature=0.0)
    next(tokens)                                   # the prompt's prefill and the first token
    start = time.perf_counter()
    for _ in tokens:
        pass
    return (new_tokens - 1) / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--new-tokens", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--prompt", type=int, default=32, help="prompt tokens")
    parser.add_argument("--context", type=int, default=1024)
    args = parser.parse_args()
    runs = models(args.context)
    ids = np.random.default_rng(1).integers(0, SHAPE["vocab_size"], (1, args.prompt))
    best = {name: 0.0 for name in runs}
    threads = free_cores()   # the CLI's rule (glassformer/blas.py): BLAS on the idle cores only
    with blas_threads(threads):
        for _ in range(args.rounds):
            for name, model in runs.items():   # in turn: machine noise hits all three
                best[name] = max(best[name], tokens_per_second(model, ids, args.new_tokens))
    cache_bytes = {name: model.cache_bytes(1, 1) for name, model in runs.items()}
    print(f"{'attention':<10} {'cache B/token':>14} {'vs MHA':>8} {'tokens/s':>10} {'vs MHA':>8}")
    for name in runs:
        print(f"{name:<10} {cache_bytes[name]:>14,} {cache_bytes[name] / cache_bytes['mha']:>8.3f} "
              f"{best[name]:>10.1f} {best[name] / best['mha']:>8.2f}")
    print(json.dumps({"new_tokens": args.new_tokens, "prompt": args.prompt, "rounds": args.rounds,
                      "blas_threads": threads,
                      "cache_bytes_per_token": cache_bytes,
                      "tokens_per_s": {name: round(v, 1) for name, v in best.items()},
                      "mla_cache_vs_mha": round(cache_bytes["mla"] / cache_bytes["mha"], 4),
                      "mla_cache_vs_gqa": round(cache_bytes["mla"] / cache_bytes["gqa"], 4),
                      "mla_tok_s_vs_mha": round(best["mla"] / best["mha"], 3),
                      "mla_tok_s_vs_gqa": round(best["mla"] / best["gqa"], 3)}))


if __name__ == "__main__":
    main()
