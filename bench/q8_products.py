"""A decoded token's products, float32 activations against 8-bit ones, kernel by kernel.

SmolLM2-135M-Instruct's own Q4_1 file (--model takes another .gguf): every kept-quantized
matrix of the model (210 Q4_1 rows-times-x products and the Q8_0 LM head), one row of x each,
as a decode step multiplies them; each product timed on both compiled paths in this one process,
alternating, best of --repeats:

- `float32`: kernels/quant_numba.py (the default: x as it is);
- `q8`: kernels/q8_numba.py (x rounded to 8-bit blocks, integer block products, llama.cpp's
  arithmetic; --activation-quant q8).

Two ways a W is read: `hot` (the same matrix again and again: W in cache, the kernels' compute
alone) and `token` (the model's matrices in a decode step's order: W streams from memory, as in
decode). Unlike bench/activation_quant.py, nothing else of the token is timed, so on a busy
machine the two paths' ratio is steadier.

    python bench/q8_products.py [--model smollm2|FILE.gguf] [--threads 1] [--repeats 5]

Last line: one JSON object (microseconds a product, ms a token's products, q8 / float32).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bandwidth import best_seconds as best_of  # noqa: E402  (the least seconds, after a warm-up)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    from glassformer.blas import blas_threads
    from glassformer.io.pretrained import load_pretrained
    from glassformer.kernels.choice import q8_kernels, quant_kernels
    from glassformer.packaged import MODEL, resolve_path
    path = str(resolve_path(args.model, MODEL))
    paths = {"float32": quant_kernels("numba").rows_t_product,
             "q8": q8_kernels("numba").activation_product}
    rng = np.random.default_rng(0)
    with blas_threads(args.threads):
        model = load_pretrained(path, tokenizer=False)
        mats = [m for m in model.params.values() if hasattr(m, "blocks")]
        xs = [rng.standard_normal((1, m.cols), dtype=np.float32) for m in mats]
        for product in paths.values():                               # compile
            for m, x in zip(mats[:8], xs):
                product(x, m.kind, m.blocks, m.cols)
        shapes = {}
        for m, x in zip(mats, xs):
            shapes.setdefault((m.kind, m.blocks.shape[0], m.cols), (m, x))
        hot = {}
        for (kind, rows, cols), (m, x) in shapes.items():
            loops = max(3, 3_000_000 // (rows * cols))
            hot[f"{kind} {rows}x{cols}"] = {
                name: round(1e6 * best_of(lambda p=p: [p(x, kind, m.blocks, cols)
                                                       for _ in range(loops)],
                                          args.repeats) / loops, 1)
                for name, p in paths.items()}
        token = {name: 1e3 * best_of(lambda p=p: [p(x, m.kind, m.blocks, m.cols)
                                                  for m, x in zip(mats, xs)], args.repeats)
                 for name, p in paths.items()}
    for shape, t in hot.items():
        print(f"{shape:>18}: float32 {t['float32']:8.1f} us, q8 {t['q8']:8.1f} us "
              f"(q8 / float32 {t['q8'] / t['float32']:.2f}), W in cache", flush=True)
    print(f"a token's {len(mats)} products: float32 {token['float32']:.2f} ms, q8 "
          f"{token['q8']:.2f} ms (q8 / float32 {token['q8'] / token['float32']:.2f})", flush=True)
    print(json.dumps({"model": path, "threads": args.threads, "hot_us": hot,
                      "token_ms": {k: round(v, 3) for k, v in token.items()},
                      "q8_over_float32": {"token": round(token["q8"] / token["float32"], 3),
                                          **{s: round(t["q8"] / t["float32"], 3)
                                             for s, t in hot.items()}}}))


if __name__ == "__main__":
    main()
