"""Decode with 8-bit activations (--activation-quant q8) against float32 activations and llama.cpp.

On one GGUF file (default: SmolLM2-135M-Instruct's own Q4_1; --model takes another, e.g. a Q8_0
file from `glassformer quantize`), in this one process, the same 2 threads (llama.cpp's
n_threads, glassformer's BLAS threads), greedy decode after a --prompt-tokens prompt, best of
--repeats, the sides alternating:

- `float32`: glassformer, blocks kept quantized, float32 activations (the default);
- `q8`: glassformer rounding the activations to 8-bit blocks, integer block products
  (ops/quant/activations_q8.py, compiled: kernels/q8_numba.py), as llama.cpp does;
- `llama.cpp`: llama-cpp-python on the same file.

Each glassformer side's decode as a share of the bandwidth measured in this run
(bench/bandwidth.py): bytes a token reads (the blocks, the float32 norms, the KV cache so far) x
tokens/s / bandwidth, as bench/generate.py counts them.

    python bench/activation_quant.py [--model smollm2|FILE.gguf] [--new-tokens 32] [--repeats 3]

Last line: one JSON object (tokens/s, ratios to llama.cpp, bandwidth shares).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT))

from bandwidth import stream_bandwidth  # noqa: E402
from llamacpp import decode_tok_s, held_out_text  # noqa: E402


def glassformer_tok_s(model, ids, new_tokens, context) -> float:
    from glassformer.generate.generate import generate
    steps = iter(generate(model, np.array([ids]), max_new_tokens=new_tokens, temperature=0.0,
                          kv_cache=model.new_cache(1, context)))
    next(steps)                                                  # the prefill and first token
    start = time.perf_counter()
    for _ in range(new_tokens - 1):
        next(steps)
    return (new_tokens - 1) / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--prompt-tokens", type=int, default=32)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    from llama_cpp import Llama

    from glassformer.blas import blas_threads
    from glassformer.io.pretrained import load_pretrained
    from glassformer.packaged import MODEL, resolve_path
    path = str(resolve_path(args.model, MODEL))
    context = args.prompt_tokens + args.new_tokens + 8
    with blas_threads(args.threads):
        ours = {mode: load_pretrained(path, activations=mode) for mode in ("float32", "q8")}
        llm = Llama(path, n_ctx=context, n_threads=args.threads, n_threads_batch=args.threads,
                    verbose=False)
        ids = ours["q8"].tokenizer.encode(held_out_text()[: args.prompt_tokens * 8])
        ids = ids[: args.prompt_tokens]
        for model in ours.values():                             # compile, warm the caches
            glassformer_tok_s(model, ids, 3, context)
        best = {"float32": 0.0, "q8": 0.0, "llama.cpp": 0.0}
        for _ in range(args.repeats):
            for mode, model in ours.items():
                best[mode] = max(best[mode], glassformer_tok_s(model, ids, args.new_tokens,
                                                               context))
            best["llama.cpp"] = max(best["llama.cpp"],
                                    decode_tok_s("llama.cpp", llm, ids, args.new_tokens, 0))
        bandwidth = stream_bandwidth(mib=256, runs=3)["bandwidth_gb_s"]
    model = ours["q8"]
    weights = sum(value.nbytes for value in model.params.values())
    kv = model.cache_bytes(1, args.prompt_tokens + args.new_tokens // 2)   # the mean context
    per_token = weights + kv
    result = {"model": path, "threads": args.threads, "bytes_per_token": per_token,
              "bandwidth_gb_s": bandwidth,
              "decode_tok_s": {k: round(v, 2) for k, v in best.items()},
              "over_llama_cpp": {k: round(best[k] / best["llama.cpp"], 3)
                                 for k in ("float32", "q8")},
              "bandwidth_share": {k: round(per_token * best[k] / (bandwidth * 1e9), 3)
                                  for k in ("float32", "q8", "llama.cpp")}}
    for k in ("float32", "q8", "llama.cpp"):
        print(f"{k:>10}: {best[k]:.1f} tokens/s, share of bandwidth "
              f"{result['bandwidth_share'][k]:.2f}", flush=True)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
