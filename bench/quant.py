"""Quantized weights (ops/quant/) against float32, on SmolLM2-135M-Instruct's own GGUF file.

For each way of holding the weights, in a child process that runs only that one (so its peak RSS
is its own): load, then decode --new-tokens greedy tokens after a 32-token prompt (batch 1, KV
cache), best of --repeats. Rows:

    float32      the shipped Q4_1 file widened to float32 on load (load_pretrained(dequantize=True))
    q4_1_numpy   the shipped file, matrices kept in their Q4_1 blocks, GLASSFORMER_KERNELS=numpy:
                 ops/quant/product.py's slabs of widened rows and BLAS (the reference)
    q4_1         the same, on the compiled products (kernels/quant_numba.py; GLASSFORMER_KERNELS
                 as set, auto by default: numba when installed)
    q8_0, q4_k   the file requantized by `glassformer quantize` (written to a temp folder first)

Each child sizes BLAS to the free cores as the CLI does, and every row is run --rounds times,
alternating, best kept (a shared machine only slows a run down). Reported per row: decode
tokens/s, the weights' bytes held (sum of nbytes: also the bytes a token reads, the tied head
reading the whole table), peak RSS, the ratios to float32, and `bandwidth_share` = bytes read per
token x tokens/s / bench/bandwidth.py's streaming bandwidth, measured in the same run. Also the
product alone: one (1, 576) @ (576, 1536) matrix-vector product from Q4_1 blocks (NumPy
reference and compiled) vs the float32 weight, and vs widening the whole weight first.

    python bench/quant.py [--new-tokens 32] [--repeats 2] [--rounds 2] [--skip-requantize]
                          [--keep DIR]

Last line: one JSON object.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bandwidth import stream_bandwidth  # noqa: E402  (bench/bandwidth.py)

CHILD = r"""
import json, sys, time
import numpy as np
from glassformer.blas import blas_threads, free_cores
from glassformer.generate.generate import generate
from glassformer.io.pretrained import load_pretrained
path, dequantize = sys.argv[1], sys.argv[2] == "1"
new_tokens, repeats = int(sys.argv[3]), int(sys.argv[4])
model = load_pretrained(path, dequantize=dequantize)
held = sum(v.nbytes for v in model.params.values())
prompt = np.array([model.tokenizer.encode("Once upon a time, in a quiet village by the sea, "
                                          "there lived an old fisherman who")[:32]])
best = 0.0
with blas_threads(free_cores()):                   # as the CLI sizes it (glassformer/blas.py)
    for _ in range(repeats):
        steps = generate(model, prompt, max_new_tokens=new_tokens, temperature=0.0)
        next(steps)                                # the prompt's prefill and the first token
        start = time.perf_counter()
        n = sum(1 for _ in steps)
        best = max(best, n / (time.perf_counter() - start))
# VmHWM, not ru_maxrss: Linux keeps ru_maxrss across exec, so a child would report its parent's
status = open("/proc/self/status").read()
peak = int(status.split("VmHWM:")[1].split()[0]) * 1024
print(json.dumps({"tok_s": best, "held_bytes": held, "peak_rss": peak}))
"""


def run_child(path: str, dequantize: bool, new_tokens: int, repeats: int,
              kernels: str | None = None) -> dict:
    env = dict(os.environ, **({"GLASSFORMER_KERNELS": kernels} if kernels else {}))
    done = subprocess.run([sys.executable, "-c", CHILD, path, "1" if dequantize else "0",
                           str(new_tokens), str(repeats)], capture_output=True, text=True,
                          check=True, env=env)
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

    from glassformer.kernels.choice import quant_kernels
    from glassformer.ops.quant.product import rows_t_product

    compiled = quant_kernels()
    result = {"q4_1_numpy_us": 1e6 * best(lambda: rows_t_product(x, "q4_1", q.blocks, 576)),
              "float32_us": 1e6 * best(lambda: x @ dense),
              "widen_whole_us": 1e6 * best(lambda: x @ q.dequantize())}
    if compiled is not None:
        result["q4_1_compiled_us"] = 1e6 * best(
            lambda: compiled.rows_t_product(x, "q4_1", q.blocks, 576))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=2,
                        help="times every row is run, alternating; best kept")
    parser.add_argument("--skip-requantize", action="store_true",
                        help="only float32 and the shipped Q4_1")
    parser.add_argument("--keep", default=None, metavar="DIR",
                        help="write the requantized files to DIR, and reuse them when there")
    args = parser.parse_args()
    from glassformer.blas import blas_threads, free_cores
    from glassformer.io.gguf_write import quantize_gguf
    from glassformer.packaged import MODEL, packaged_path

    shipped = str(packaged_path("smollm2", MODEL))
    rows = {"float32": (shipped, True, None), "q4_1_numpy": (shipped, False, "numpy"),
            "q4_1": (shipped, False, None)}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(args.keep or tmp)
        folder.mkdir(parents=True, exist_ok=True)
        if not args.skip_requantize:
            for kind in ("q8_0", "q4_k"):
                out = folder / f"smollm2.{kind}.gguf"
                if not out.is_file():
                    quantize_gguf(shipped, kind, out)
                rows[kind] = (str(out), False, None)
        results: dict[str, dict] = {}
        for _ in range(args.rounds):
            for name, (path, deq, kernels) in rows.items():
                r = run_child(path, deq, args.new_tokens, args.repeats, kernels)
                if name not in results or r["tok_s"] > results[name]["tok_s"]:
                    results[name] = r
    with blas_threads(free_cores()):
        bandwidth = stream_bandwidth(mib=256, runs=5)["bandwidth_gb_s"]
    base = results["float32"]
    for name, r in results.items():
        r["tok_s_vs_float32"] = r["tok_s"] / base["tok_s"]
        r["held_vs_float32"] = r["held_bytes"] / base["held_bytes"]
        r["rss_vs_float32"] = r["peak_rss"] / base["peak_rss"]
        r["bandwidth_share"] = round(r["held_bytes"] * r["tok_s"] / (bandwidth * 1e9), 3)
        print(f"{name:10s} {r['tok_s']:6.1f} tok/s ({r['tok_s_vs_float32']:.2f}x)  "
              f"bandwidth share {r['bandwidth_share']:.2f}  weights "
              f"{r['held_bytes'] / 2**20:6.1f} MiB ({r['held_vs_float32']:.2f}x)  peak RSS "
              f"{r['peak_rss'] / 2**20:6.1f} MiB ({r['rss_vs_float32']:.2f}x)")
    with blas_threads(free_cores()):
        products = product_times()
    print(f"(1,576)@(576,1536): q4_1 blocks {products['q4_1_numpy_us']:.0f} us (NumPy), "
          f"{products.get('q4_1_compiled_us', float('nan')):.0f} us (compiled), float32 "
          f"{products['float32_us']:.0f} us, widening the whole weight first "
          f"{products['widen_whole_us']:.0f} us; bandwidth {bandwidth} GB/s")
    print(json.dumps({"rows": results, "product": products, "bandwidth_gb_s": bandwidth,
                      "file_bytes": Path(shipped).stat().st_size}))


if __name__ == "__main__":
    main()
