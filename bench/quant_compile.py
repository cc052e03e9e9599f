"""What the compiled quantized products (kernels/quant_numba.py) cost to start: numba's compile
in a machine's first process, and what a second one pays once they are cached on disk.

Two child processes with the same, initially empty, NUMBA_CACHE_DIR; each imports the kernels and
runs one product of every format on a tiny matrix (quantized before the clock starts):

    first    every format's product compiles
    second   every one is loaded from the cache the first wrote

`compile_s` = first - second: what a first run pays once.

    python bench/quant_compile.py

Last line: one JSON object.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

CHILD = """
import json, time
import numpy as np
from glassformer.ops.quant import FORMATS, quantize_matrix
blocks = {kind: quantize_matrix(np.ones((4, 256), np.float32), kind).blocks for kind in FORMATS}
start = time.perf_counter()
from glassformer.kernels.choice import quant_kernels
kernels = quant_kernels("numba")
imported = time.perf_counter() - start
start = time.perf_counter()
for kind, b in blocks.items():
    kernels.rows_t_product(np.ones((1, 256), np.float32), kind, b, 256)
print(json.dumps({"import_s": imported, "first_products_s": time.perf_counter() - start}))
"""


def main() -> None:
    with tempfile.TemporaryDirectory() as cache:
        env = dict(os.environ, NUMBA_CACHE_DIR=cache, GLASSFORMER_KERNELS="numba")
        runs = {}
        for name in ("first", "second"):
            done = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True,
                                  text=True, check=True)
            runs[name] = json.loads(done.stdout.strip().splitlines()[-1])
    compile_s = runs["first"]["first_products_s"] - runs["second"]["first_products_s"]
    for name, r in runs.items():
        print(f"{name:7s} import {r['import_s']:.2f} s, first product of each format "
              f"{r['first_products_s']:.2f} s")
    print(f"compile: {compile_s:.2f} s, once per machine")
    print(json.dumps({**runs, "compile_s": round(compile_s, 3)}))


if __name__ == "__main__":
    main()
