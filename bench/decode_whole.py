"""A decoded layer in one compiled call (kernels/decode_layer_numba.py) against the call-by-call
step it replaces (blocks/decode_step.py: 3-4 BLAS products and 3-4 kernels a layer, each called
from Python), in one process, alternating rounds (so a busy machine slows both alike):

    by_call   the plan's `whole` flag off (blocks/decode_plan.py: whole_layer gives False)
    whole     one `layer_step` call a layer, its products NumPy's own OpenBLAS sgemv called from
              inside the loop (kernels/blas_numba.py)

on SmolLM2-135M widened to float32 and on the GPT-2-124M shape (bench/generate.py's model): CPU
ms and wall ms per decoded token (bench/decode_pack.py's `alternate`: best and median of
--rounds, greedy tokens after a 32-token prompt, and whether both gave the same tokens).

    python bench/decode_whole.py [--threads 1] [--new-tokens 24] [--rounds 8] [--parts smollm2,gpt2]

Last line: one JSON object (per part and variant: cpu_ms, cpu_ms_median, wall_ms; the ratios).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from decode_pack import alternate  # noqa: E402  (bench/decode_pack.py)
from generate import our_model  # noqa: E402  (bench/generate.py)

import glassformer.blocks.decode_plan as plan  # noqa: E402
from glassformer.blas import blas_threads  # noqa: E402
from glassformer.io.pretrained import load_pretrained  # noqa: E402


def part(model, new_tokens: int, rounds: int) -> dict:
    whole_layer = plan.whole_layer

    def setting(check):
        def setup():     # a new cache per generate: each run gathers its plan with this
            plan.whole_layer = check
        return model, setup
    result = alternate({"by_call": setting(lambda op: False), "whole": setting(whole_layer)},
                       new_tokens, rounds)
    plan.whole_layer = whole_layer
    for key in ("cpu_ms", "cpu_ms_median", "wall_ms"):
        result["whole"][key.replace("_ms", "_ratio")] = round(
            result["whole"][key] / result["by_call"][key], 3)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1, help="BLAS and numba threads")
    parser.add_argument("--new-tokens", type=int, default=24)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--parts", default="smollm2,gpt2")
    args = parser.parse_args()
    out = {"threads": args.threads}
    with blas_threads(args.threads):
        for name in args.parts.split(","):
            model = {"smollm2": lambda: load_pretrained("smollm2", dequantize=True),
                     "gpt2": our_model}[name]()
            out[name] = part(model, args.new_tokens, args.rounds)
            print(name, json.dumps(out[name]), flush=True)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
