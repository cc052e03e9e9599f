"""`glassformer quantize` round trip through llama.cpp (issue 44): a GGUF file glassformer
writes loads in llama-cpp-python and gives the same greedy tokens as glassformer on it.

For each --types format, `glassformer quantize --model smollm2 --type T --out FILE` writes a file
in a scratch folder; then llama.cpp (llama_cpp.Llama, greedy: top_k 1, temperature 0) and
glassformer (load_pretrained: the blocks kept quantized, generate at temperature 0) each
continue the same prompt ids by --new-tokens tokens, and the two sequences are compared.

Greedy tokens can part where the model's top two logits are nearly equal: llama.cpp rounds the
activations to 8 bits before each product with a quantized weight, glassformer keeps them in
float32. So glassformer is also run teacher-forced on llama.cpp's tokens: its top-1 at each of
llama.cpp's steps, the largest llama.cpp top-2 gap where they differ, and the largest logit
difference. The same is measured first on llama.cpp's own Q4_1 file (the baseline: a file both
surely read right). A written file passes when the greedy tokens are equal, or when every
teacher-forced difference is at a near tie (--tie) and the logits are no further apart than on
the baseline times --slack: a misread file would put them tens of logits apart.

This is a benchmark script, not a test: tests never import llama_cpp (a benchmark dependency).

    python bench/quant_roundtrip.py [--types q8_0,q4_0,q4_1,q4_k] [--new-tokens 32]

Last line: one JSON object per file (the baseline and each format): greedy tokens equal, first
difference, the teacher-forced figures, and whether the file passed. Exit status 1 when any
written file did not.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
PROMPT = "First Citizen:\nBefore we proceed any further, hear me speak.\n\nAll:\n"


def quantize(kind: str, out: Path) -> None:
    """The file, written by the command a user runs."""
    subprocess.run([sys.executable, "-m", "glassformer", "quantize", "--model", "smollm2",
                    "--type", kind, "--out", str(out)], check=True,
                   env={**os.environ, "PYTHONPATH": str(ROOT)})


def llama_greedy(path: Path, ids: list[int], n: int, threads: int) -> tuple[list[int], list]:
    """llama.cpp's greedy continuation, and its logits at each step (for the top-2 gaps)."""
    from llama_cpp import Llama
    llm = Llama(str(path), n_ctx=len(ids) + n + 8, n_threads=threads, n_threads_batch=threads,
                logits_all=True, verbose=False)
    out, steps = [], llm.generate(ids, top_k=1, temp=0.0, reset=True)
    for _ in range(n):
        out.append(int(next(steps)))
    steps.close()
    logits = [np.array(llm.scores[len(ids) - 1 + k]) for k in range(n)]
    return out, logits


def ours_greedy(model, ids: list[int], n: int) -> list[int]:
    from glassformer.generate.generate import generate
    return [int(t[0]) for t in generate(model, np.array([ids]), max_new_tokens=n,
                                        temperature=0.0)]


def compare(path: Path, ids: list[int], args) -> dict:
    """Both sides on one file: free-running greedy tokens, then glassformer teacher-forced on
    llama.cpp's tokens (its top-1 at each of llama.cpp's steps, and the logit gap)."""
    from glassformer.io.pretrained import load_pretrained
    theirs, logits = llama_greedy(path, ids, args.new_tokens, args.threads)
    model = load_pretrained(path)
    ours = ours_greedy(model, ids, args.new_tokens)
    ref = np.stack(logits)                                                  # (n, V)
    got = model.forward(np.array([ids + theirs]))[0][0][len(ids) - 1:-1]    # (n, V)
    two = np.sort(ref, axis=-1)[:, -2:]                                     # (n, 2)
    gaps = (two[:, 1] - two[:, 0])[got.argmax(-1) != ref.argmax(-1)]
    differ = [k for k, (a, b) in enumerate(zip(theirs, ours)) if a != b]
    result = {"bytes": path.stat().st_size, "tokens": args.new_tokens,
              "greedy_equal": not differ, "first_difference": differ[0] if differ else None,
              "forced_top1_agreement": round(1 - len(gaps) / len(ref), 4),
              "forced_largest_gap_where_top1_differs": round(float(gaps.max()), 4)
              if len(gaps) else None,
              "forced_max_abs_logit_diff": round(float(np.abs(got - ref).max()), 3)}
    return result


def check(kind: str, scratch: Path, args, baseline: dict) -> dict:
    """One format: write the file with `glassformer quantize`, then compare on it. Passed: equal
    greedy tokens, or (they parted at a near tie) every teacher-forced top-1 difference at a
    llama.cpp top-2 gap under --tie and logits no further apart than on llama.cpp's own file
    (the baseline) times --slack."""
    from glassformer.tokenizers.load import load_tokenizer
    path = scratch / f"smollm2-{kind}.gguf"
    quantize(kind, path)
    result = compare(path, load_tokenizer(path).encode(PROMPT), args)
    near = (result["forced_largest_gap_where_top1_differs"] or 0.0) < args.tie
    close = result["forced_max_abs_logit_diff"] <= args.slack * baseline[
        "forced_max_abs_logit_diff"]
    result["passed"] = result["greedy_equal"] or (near and close)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--types", default="q8_0,q4_0,q4_1,q4_k")
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--tie", type=float, default=0.25,
                        help="llama.cpp's top-2 gap under which a top-1 difference is rounding")
    parser.add_argument("--slack", type=float, default=2.0,
                        help="how much further apart than on llama.cpp's own file the logits "
                             "may be")
    args = parser.parse_args()
    from glassformer.blas import blas_threads
    from glassformer.packaged import MODEL, resolve_path
    from glassformer.tokenizers.load import load_tokenizer
    results = {}
    with blas_threads(args.threads), tempfile.TemporaryDirectory() as scratch:
        own = Path(resolve_path("smollm2", MODEL))
        results["llama.cpp's own Q4_1 file"] = baseline = compare(
            own, load_tokenizer(own).encode(PROMPT), args)
        show("own q4_1", baseline)
        for kind in args.types.split(","):
            results[kind] = check(kind, Path(scratch), args, baseline)
            show(kind, results[kind])
    print(json.dumps(results))
    sys.exit(0 if all(r.get("passed", True) for r in results.values()) else 1)


def show(name: str, r: dict) -> None:
    where = ("equal" if r["greedy_equal"] else
             f"parting at token {r['first_difference']}")
    verdict = {True: ": passed", False: ": FAILED"}.get(r.get("passed"), "")
    print(f"{name:>8}: {r['bytes'] / 2**20:.1f} MiB, {r['tokens']} greedy tokens {where}; "
          f"forced on llama.cpp's tokens: top-1 {r['forced_top1_agreement']:.0%} (largest "
          f"top-2 gap where they differ {r['forced_largest_gap_where_top1_differs']}), max "
          f"|logit diff| {r['forced_max_abs_logit_diff']}{verdict}", flush=True)


if __name__ == "__main__":
    main()
