"""What the compiled kernels cost to start: numba's compile on a machine's first run, and what a
second process pays once they are cached on disk (kernels/choice.py: cache_dir).

Three child processes, each decoding a few tokens with a SmolLM2-shaped LLaMA and a GPT-2-shaped
model (small widths: compiling does not depend on them, and both families' kernel variants are
compiled), laid out as loaded models are (models/layout.py):

    numpy   GLASSFORMER_KERNELS=numpy, the reference: no compile
    first   GLASSFORMER_KERNELS=numba with an empty NUMBA_CACHE_DIR: every kernel compiles
    second  the same, again: every kernel is loaded from the cache the first one wrote

For each: `import_s` (importing glassformer and choosing the kernels, numba's import included
where it runs), `first_step_s` (the first decoded step of both models, where a kernel compiles
or loads), `steady_step_s` (a later step). `compile_s` = first - steady step of the first run;
`cached_s` the same of the second.

    python bench/kernels_compile.py

Last line: one JSON object.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time

CHILD = """
import json, time
start = time.perf_counter()
import numpy as np
import glassformer
from glassformer.kernels.choice import decode_kernels
from glassformer.models import gpt2, llama
from glassformer.models.layout import lay_out_for_decoding
from glassformer.models.model import Model
decode_kernels()
imported = time.perf_counter() - start

def model(family, cfg):
    params = family.init_params(cfg, np.random.default_rng(0))
    lay_out_for_decoding(params)
    return Model(cfg, params)

models = [model(llama, llama.LlamaConfig(vocab_size=64, max_seq_len=64, n_layer=2, n_head=3,
                                         n_kv_head=1, d_model=48, tie_embeddings=True)),
          model(gpt2, gpt2.GPT2Config(vocab_size=64, max_seq_len=64, n_layer=2, n_head=4,
                                      d_model=32, activation="gelu_tanh"))]
caches = [m.new_cache(1, 16) for m in models]
for m, cache in zip(models, caches):                 # prompts: the NumPy path, no kernel
    m.forward(np.array([[1, 2, 3]]), kv_cache=cache, last_only=True)
    cache.advance(3)

def step():
    start = time.perf_counter()
    for m, cache in zip(models, caches):
        m.forward(np.array([[4]]), kv_cache=cache, last_only=True)
        cache.advance(1)
    return time.perf_counter() - start

first = step()
steady = min(step() for _ in range(5))
print(json.dumps({"import_s": imported, "first_step_s": first, "steady_step_s": steady}))
"""


def run(kernels: str, cache: str) -> dict:
    env = {**os.environ, "GLASSFORMER_KERNELS": kernels, "NUMBA_CACHE_DIR": cache}
    done = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True,
                          text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    with tempfile.TemporaryDirectory() as cache:
        runs = {"numpy": run("numpy", cache), "first": run("numba", cache),
                "second": run("numba", cache)}
    result = {f"{name}_{key}": round(value, 4) for name, figures in runs.items()
              for key, value in figures.items()}
    result["compile_s"] = round(runs["first"]["first_step_s"] - runs["first"]["steady_step_s"], 3)
    result["cached_s"] = round(runs["second"]["first_step_s"] - runs["second"]["steady_step_s"], 3)
    for key, value in result.items():
        print(f"{key:28s} {value}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
