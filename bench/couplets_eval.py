"""Tang couplets: second couplets written by a `train --arch transformer --data
tang-couplets:PATH` run for held-out first couplets.

    python -m bench.couplets_eval --model RUN --data ../shared/data/tang_quatrains.txt [--beam 4]

For every pair of the split (train/datasets/pairs.py's fixed crc32 split; default test):

    form      share of outputs with the reference's length and its punctuation in the same
              places (the comma after the first line, the stop at the end) and none elsewhere
    char acc  share of reference positions where the output has the same character
    copy      char acc of copying the first couplet (the baseline: ~13.5%, nearly all of it
              from the two punctuation slots)

Also prints the run's last validation loss and some examples; last line one JSON object.
"""
from __future__ import annotations

import argparse
import json
import sys
import time

from glassformer.io.checkpoint import read_train_log
from glassformer.io.named_models import load_model
from glassformer.tasks.translate import translate
from glassformer.train.datasets.pairs import read_pairs, split_pairs

PUNCTUATION = set("，。、？！；：")


def same_form(output: str, reference: str) -> bool:
    """Same length, punctuation exactly where the reference has it."""
    if len(output) != len(reference):
        return False
    return all((o in PUNCTUATION) == (r in PUNCTUATION) and (r not in PUNCTUATION or o == r)
               for o, r in zip(output, reference))


def char_accuracy(outputs: list[str], references: list[str]) -> float:
    hits = sum(sum(o == r for o, r in zip(out, ref)) for out, ref in zip(outputs, references))
    return hits / sum(len(ref) for ref in references)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="a train --arch transformer run folder")
    parser.add_argument("--data", required=True, help="the quatrain file the run trained on")
    parser.add_argument("--beam", type=int, default=1, help="beam width (1: greedy)")
    parser.add_argument("--split", default="test", choices=["test", "val", "train"])
    parser.add_argument("--examples", type=int, default=8)
    args = parser.parse_args(argv)
    model = load_model(args.model)
    part = split_pairs(read_pairs(f"tang-couplets:{args.data}"))[args.split]
    start = time.perf_counter()
    outputs = translate(model, part.sources, beam=args.beam)
    seconds = time.perf_counter() - start
    form = sum(same_form(o, r) for o, r in zip(outputs, part.targets)) / len(outputs)
    acc = char_accuracy(outputs, part.targets)
    copy = char_accuracy(part.sources, part.targets)
    val = [r["val_loss"] for r in read_train_log(args.model) if "val_loss" in r]
    print(f"{args.split} split: {len(outputs):,} couplets, beam {args.beam}: right length and "
          f"punctuation {form:.1%}, char accuracy {acc:.1%} (copy baseline {copy:.1%}); last "
          f"val loss {val[-1] if val else float('nan'):.3f} (decoded in {seconds:.1f} s)")
    for source, output, target in list(zip(part.sources, outputs, part.targets))[:args.examples]:
        print(f"  {source} -> {output}   (poet: {target})")
    print(json.dumps({"form": form, "char_accuracy": acc, "copy_baseline": copy,
                      "val_loss": val[-1] if val else None, "couplets": len(outputs),
                      "beam": args.beam, "decode_seconds": round(seconds, 1)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
