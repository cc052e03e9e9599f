"""G2P on CMUdict: word and phoneme error rates of a `train --arch transformer --data cmudict` run.

    python -m bench.g2p_eval --model RUN [--beam 4] [--split test] [--limit N]

Every word of the split (train/datasets/pairs.py's fixed crc32 split) is decoded once; stress is
removed from the references as in training. As the transformer G2P paper (Yolchuyeva et al. 2019,
arXiv 2004.06338) counts them:

    WER = share of words whose output equals none of the word's listed pronunciations
    PER = sum over words of the edit distance to the closest listed pronunciation
          / sum over words of that pronunciation's length (in phones)

Prints the two rates, a few outputs, and the decoding time; last line one JSON object.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time

from glassformer.blas import blas_threads
from glassformer.io.named_models import load_model
from glassformer.tasks.translate import translate
from glassformer.train.datasets.pairs import cmudict_pronunciations, split_of


def edit_distance(a: list[str], b: list[str]) -> int:
    """Levenshtein distance between two phone sequences (substitution, insertion, deletion 1)."""
    previous = list(range(len(b) + 1))
    for i, x in enumerate(a, start=1):
        current = [i]
        for j, y in enumerate(b, start=1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (x != y)))
        previous = current
    return previous[-1]


def g2p_scores(words: list[str], outputs: list[str], references: dict[str, list[str]]) -> dict:
    """{"wer", "per", "words", "phones"} of outputs against every listed pronunciation."""
    wrong, errors, phones = 0, 0, 0
    for word, output in zip(words, outputs):
        refs = references[word]
        wrong += output not in refs
        hyp = output.split()
        distance, length = min((edit_distance(hyp, ref.split()), len(ref.split()))
                               for ref in refs)
        errors += distance
        phones += length
    return {"wer": wrong / len(words), "per": errors / phones, "words": len(words),
            "phones": phones}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="a train --arch transformer run folder")
    parser.add_argument("--beam", type=int, default=1, help="beam width (1: greedy)")
    parser.add_argument("--alpha", type=float, default=0.6, help="GNMT length penalty exponent")
    parser.add_argument("--split", default="test", choices=["test", "val", "train"])
    parser.add_argument("--limit", type=int, default=None, help="only the first N words")
    parser.add_argument("--threads", type=int, default=None, help="BLAS threads")
    args = parser.parse_args(argv)
    model = load_model(args.model)
    references = cmudict_pronunciations()
    words = sorted(w for w in references if split_of(w) == args.split)[:args.limit]
    start = time.perf_counter()
    with blas_threads(args.threads) if args.threads else contextlib.nullcontext():
        outputs = translate(model, words, beam=args.beam, alpha=args.alpha)
    seconds = time.perf_counter() - start
    scores = g2p_scores(words, outputs, references)
    print(f"{args.split} split: {scores['words']:,} words, {scores['phones']:,} phones; beam "
          f"{args.beam}: WER {scores['wer']:.1%}, PER {scores['per']:.1%} "
          f"(decoded in {seconds:.1f} s)")
    for word, output in list(zip(words, outputs))[:8]:
        mark = "ok" if output in references[word] else "ref " + " | ".join(references[word])
        print(f"  {word:>14} -> {output:<28} {mark}")
    print(json.dumps({**scores, "beam": args.beam, "alpha": args.alpha, "split": args.split,
                      "decode_seconds": round(seconds, 1)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
