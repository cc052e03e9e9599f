"""Where a quantized SmolLM2 process's memory goes, step by step (issue 44's peak-memory figure).

One process does what bench/llamacpp.py's glassformer child does (load with the tokenizer, a
512-token prefill, greedy decode), and after each step prints its resident memory from
/proc/self/status: VmRSS, VmHWM (the peak so far, what the llama.cpp bench compares), RssAnon
(the process's own allocations) and RssFile (mapped files: the GGUF file's pages, shared
libraries such as llvmlite's LLVM). The first forward is a separate step because it loads the
compiled kernels (numba, llvmlite, numba's own start-up imports). At the end, the resident
memory of each mapping (/proc/self/smaps), largest first. The reference side's figure is
bench/llamacpp.py's; this script explains glassformer's.

    python bench/memory_steps.py [--model smollm2] [--prompt-tokens 512] [--new-tokens 64]
    GLASSFORMER_KERNELS=numpy python bench/memory_steps.py     # the NumPy path: no numba

Last line: one JSON object, each step's figures in MiB.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
KEYS = ("VmRSS", "VmHWM", "RssAnon", "RssFile")


def status() -> dict[str, float]:
    """This process's KEYS from /proc/self/status, in MiB."""
    found = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key = line.split(":")[0]
        if key in KEYS:
            found[key] = round(int(line.split()[1]) / 1024, 1)
    return found


def mappings(top: int) -> list[tuple[str, float]]:
    """The `top` mappings (by file, or [anon]/[heap]) with the most resident MiB."""
    rss: Counter = Counter()
    name = "[anon]"
    for line in Path("/proc/self/smaps").read_text().splitlines():
        if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
            fields = line.split()
            name = re.sub(r".*/(site-packages|lib)/", "", fields[5]) if len(fields) > 5 else "[anon]"
        elif line.startswith("Rss:"):
            rss[name] += int(line.split()[1])
    return [(name, round(kib / 1024, 1)) for name, kib in rss.most_common(top)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2", help="a .gguf file or smollm2")
    parser.add_argument("--prompt-tokens", type=int, default=512)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--top", type=int, default=8, help="mappings listed at the end")
    args = parser.parse_args()
    steps = {}

    def step(name: str) -> None:
        steps[name] = status()
        print(f"{name:>32}: " + "  ".join(f"{k} {v:6.1f}" for k, v in steps[name].items()),
              flush=True)

    step("start")
    import numpy as np
    step("numpy imported")
    from glassformer.generate.generate import generate
    from glassformer.io.pretrained import load_pretrained
    step("glassformer imported")
    model = load_pretrained(args.model)                  # the tokenizer too, as a user's load
    step("loaded (weights + tokenizer)")
    text = "The quick brown fox jumps over the lazy dog. " * (args.prompt_tokens // 4 + 1)
    ids = model.tokenizer.encode(text)[:args.prompt_tokens]
    context = args.prompt_tokens + args.new_tokens + 8
    model.forward(np.array([ids[:4]]), kv_cache=model.new_cache(1, context), last_only=True)
    step("first forward (kernels load)")
    model.forward(np.array([ids]), kv_cache=model.new_cache(1, context), last_only=True)
    step(f"prefill {len(ids)} tokens")
    for _ in generate(model, np.array([ids[:32]]), max_new_tokens=args.new_tokens,
                      temperature=0.0, kv_cache=model.new_cache(1, context)):
        pass
    step(f"decode {args.new_tokens} tokens")
    top = mappings(args.top)
    for name, mib in top:
        print(f"{mib:8.1f} MiB  {name}")
    print(json.dumps({"steps": steps, "mappings": dict(top)}))


if __name__ == "__main__":
    main()
