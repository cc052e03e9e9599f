"""Real-model generation speed: SmolLM2-135M-Instruct (Q4_1 GGUF), greedy, batch 1.

glassformer (NumPy, KV cache) and HF transformers (PyTorch CPU) load the same GGUF file, both
dequantised to float32, and generate the same number of greedy tokens from the same prompt, in
this process, repeats interleaved (ours, theirs, ours, theirs); the best of the repeats is
reported, since other work on a shared machine only ever slows a run down. tokens/s counts the
whole generate call (prefill + decode) for both.

    python bench/real_models.py [--new-tokens 64] [--repeats 2] [--threads N]

--threads N caps both libraries' thread pools (OpenBLAS/OpenMP through environment variables
set before NumPy is imported, torch.set_num_threads); without it each uses its default.
Last line: one JSON object with glassformer_tok_s, transformers_tok_s and ratio.
"""
from __future__ import annotations

import argparse
import json
import os
import time

PROMPT = "The capital of France is"
THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--new-tokens", type=int, default=64, help="tokens to generate")
    parser.add_argument("--repeats", type=int, default=2, help="timed runs per library")
    parser.add_argument("--threads", type=int, default=None,
                        help="thread-pool size for both libraries (default: their own)")
    parser.add_argument("--prompt", default=PROMPT, help="the prompt")
    return parser.parse_args()


def time_ours(model, ids, new_tokens: int) -> tuple[float, list[int]]:
    from glassformer.generate.generate import generate  # after main() set the thread variables

    start = time.perf_counter()
    out = [int(step[0]) for step in generate(model, ids, max_new_tokens=new_tokens,
                                             temperature=0.0)]
    return time.perf_counter() - start, out


def time_theirs(torch, hf, ids, new_tokens: int) -> tuple[float, list[int]]:
    prompt = torch.tensor(ids)
    start = time.perf_counter()
    with torch.no_grad():
        out = hf.generate(prompt, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
                          do_sample=False, use_cache=True)
    return time.perf_counter() - start, out[0, ids.shape[1]:].tolist()


def agreeing_prefix(ours: list[int], theirs: list[int], end_ids: set[int]) -> int:
    """How many leading tokens agree, counting our first end-of-turn token as agreeing:
    transformers' forced min_new_tokens bans end tokens, so the runs part there by design."""
    count = 0
    for a, b in zip(ours, theirs):
        if a in end_ids:
            return count + 1
        if a != b:
            break
        count += 1
    return count


def main() -> None:
    args = parse_args()
    if args.threads is not None:
        for name in THREAD_VARIABLES:  # read by OpenBLAS/OpenMP when NumPy and torch load
            os.environ[name] = str(args.threads)
    import numpy as np
    import torch
    from transformers import AutoModelForCausalLM

    from glassformer.io.named_models import load_model
    from glassformer.packaged import MODEL, packaged_path

    if args.threads is not None:
        torch.set_num_threads(args.threads)
    path = packaged_path("smollm2", MODEL)
    start = time.perf_counter()
    model = load_model("smollm2")
    print(f"glassformer load: {time.perf_counter() - start:.1f} s ({model})")
    start = time.perf_counter()
    hf = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name,
                                              dtype=torch.float32).eval()
    print(f"transformers load: {time.perf_counter() - start:.1f} s "
          f"(torch threads {torch.get_num_threads()})")
    ids = np.array([model.tokenizer.encode(args.prompt)])
    ours_s, theirs_s = [], []
    for repeat in range(args.repeats):
        seconds, ours = time_ours(model, ids, args.new_tokens)
        ours_s.append(seconds)
        seconds, theirs = time_theirs(torch, hf, ids, args.new_tokens)
        theirs_s.append(seconds)
        print(f"repeat {repeat}: glassformer {args.new_tokens / ours_s[-1]:.2f} tok/s, "
              f"transformers {args.new_tokens / theirs_s[-1]:.2f} tok/s")
    end_ids = set(model.tokenizer.special_tokens.values())
    same = agreeing_prefix(ours, theirs, end_ids)
    print(f"prompt {ids.shape[1]} tokens; greedy tokens agree on the first {same} "
          f"(up to our first end token); text: {model.tokenizer.decode(ours[:same])!r}")
    ours_rate = args.new_tokens / min(ours_s)
    theirs_rate = args.new_tokens / min(theirs_s)
    print(f"best of {args.repeats}: glassformer {ours_rate:.2f} tok/s, transformers "
          f"{theirs_rate:.2f} tok/s, ratio {ours_rate / theirs_rate:.2f}x")
    print(json.dumps({"glassformer_tok_s": round(ours_rate, 3),
                      "transformers_tok_s": round(theirs_rate, 3),
                      "ratio": round(ours_rate / theirs_rate, 3),
                      "new_tokens": args.new_tokens, "threads": args.threads,
                      "torch_threads": torch.get_num_threads()}))


if __name__ == "__main__":
    main()
