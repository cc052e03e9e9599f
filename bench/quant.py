"""Quantized weights (ops/quant/) against float32, on SmolLM2-135M-Instruct's own GGUF file.

For each way of holding the weights, in a child process that runs only that one (so its peak RSS
is its own): load, then decode --new-tokens greedy tokens after a 32-token prompt (batch 1, KV
cache), best of --repeats. Rows:

    float32      the shipped Q4_1 file widened to float32 on load (load_pretrained(dequantize=True))
    q4_1         the shipped file, matrices kept in their Q4_1 blocks (the default)
    q8_0, q4_k   the file requantized by `glassformer quantize` (written to a temp folder first)

Reported per row: decode tokens/s, the weights' bytes held (sum of nbytes), peak RSS, and the
ratios to float32. Also the product alone: one (1, 576) @ (576, 1536) matrix-vector product from
Q4_1 blocks vs the float32 weight, and vs widening the whole weight first (what a product without
slabs would cost).

    python bench/quant.py [--new-tokens 32] [--repeats 2] [--skip-requantize] [--keep DIR]

Last line: one JSON object.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

CHILD = r"""
import json, sys, time
import numpy as np
from glassformer.blas import blas_threads
from glassformer.generate.generate import generate
from glassformer.io.pretrained import load_pretrained
path, dequantize = sys.argv[1], sys.argv[2] == "1"
new_tokens, repeats = int(sys.argv[3]), int(sys.argv[4])
model = load_pretrained(path, dequantize=dequantize)
held = sum(v.nbytes for v in model.params.values())
prompt = np.array([model.tokenizer.encode("Once upon a time, in a quiet village by the sea, "
                                          "there lived an old fisherman who")[:32]])
best = 0.0
for _ in range(repeats):
    steps = generate(model, prompt, max_new_tokens=new_tokens, temperature=0.0)
    next(steps)                                    # the prompt's prefill and the first token
    start = time.perf_counter()
    n = sum(1 for _ in steps)
    best = max(best, n / (time.perf_counter() - start))
# VmHWM, not ru_maxrss: Linux keeps ru_maxrss across exec, so a child would report its parent's
status = open("/proc/self/status").read()
peak = int(status.split("VmHWM:")[1].split()[0]) * 1024
print(json.dumps({"tok_s": best, "held_bytes": held, "peak_rss": peak}))
"""


def run_child(path: str, dequantize: bool, new_tokens: int, repeats: int) -> dict:
    done = subprocess.run([sys.executable, "-c", CHILD, path, "1" if dequantize else "0",
                           str(new_tokens), str(repeats)], capture_output=True, text=True,
                          check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def product_times(repeats: int = 20) -> dict:
    """One decode-sized product: Q4_1 blocks vs float32 vs widening the whole weight first."""
    from glassformer.ops.quant import quantize_weight

    rng = np.random.default_rng(0)
    w = (rng.standard_normal((576, 1536)) * 0.05).astype(np.float32)    # (in, out): ffn_up
    q = quantize_weight(w, "q4_1")
    dense = np.ascontiguousarray(q.dequantize())
    x = rng.standard_normal((1, 576)).astype(np.float32)

    def best(f):
        f()
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            f()
            times.append(time.perf_counter() - start)
        return min(times)

    return {"q4_1_us": 1e6 * best(lambda: x @ q), "float32_us": 1e6 * best(lambda: x @ dense),
            "widen_whole_us": 1e6 * best(lambda: x @ q.dequantize())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--skip-requantize", action="store_true",
                        help="only float32 and the shipped Q4_1")
    parser.add_argument("--keep", default=None, metavar="DIR",
                        help="write the requantized files to DIR, and reuse them when there")
    args = parser.parse_args()
    from glassformer.io.gguf_write import quantize_gguf
    from glassformer.packaged import MODEL, packaged_path

    shipped = str(packaged_path("smollm2", MODEL))
    rows = {"float32": (shipped, True), "q4_1": (shipped, False)}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(args.keep or tmp)
        folder.mkdir(parents=True, exist_ok=True)
        if not args.skip_requantize:
            for kind in ("q8_0", "q4_k"):
                out = folder / f"smollm2.{kind}.gguf"
                if not out.is_file():
                    quantize_gguf(shipped, kind, out)
                rows[kind] = (str(out), False)
        results = {name: run_child(path, deq, args.new_tokens, args.repeats)
                   for name, (path, deq) in rows.items()}
    base = results["float32"]
    for name, r in results.items():
        r["tok_s_vs_float32"] = r["tok_s"] / base["tok_s"]
        r["held_vs_float32"] = r["held_bytes"] / base["held_bytes"]
        r["rss_vs_float32"] = r["peak_rss"] / base["peak_rss"]
        print(f"{name:8s} {r['tok_s']:6.1f} tok/s ({r['tok_s_vs_float32']:.2f}x)  weights "
              f"{r['held_bytes'] / 2**20:6.1f} MiB ({r['held_vs_float32']:.2f}x)  peak RSS "
              f"{r['peak_rss'] / 2**20:6.1f} MiB ({r['rss_vs_float32']:.2f}x)")
    products = product_times()
    print(f"(1,576)@(576,1536): q4_1 blocks {products['q4_1_us']:.0f} us, float32 "
          f"{products['float32_us']:.0f} us, widening the whole weight first "
          f"{products['widen_whole_us']:.0f} us")
    print(json.dumps({"rows": results, "product": products,
                      "file_bytes": Path(shipped).stat().st_size}))


if __name__ == "__main__":
    main()
