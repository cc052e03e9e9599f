"""The alignment recipes' judge: how Tang quatrains look after SFT, + DPO and + GRPO.

On the first n prompts of ../shared/data/tang_sft_heldout.jsonl (never trained on), replies are
sampled at temperature 0.7 (seeded) and scored:

    well_formed         share of replies that are exactly a quatrain of the asked form
                        (bench/tang_quatrains_eval.py's is_quatrain: four clauses of 5 or 7
                        Chinese characters ending ，。，。)
    distinct_median     median over replies of (distinct Chinese characters / Chinese
                        characters) (train/rewards/tang_form.py's distinct_share; real
                        quatrains: 0.97 mean, 0.89 at the 5th percentile)
    copied              share of replies equal, character for character, to a training poem
                        (an assistant reply of tang_sft.jsonl)
    dpo_heldout_accuracy  with --adapter: the share of tang_prefs_heldout.jsonl pairs whose
                        chosen reward beats the rejected (glassformer eval's reward accuracy;
                        reference: the base, or the base + --ref-adapter)

    python -m bench.align_judge --model smollm2 --adapter SFT_RUN
    python -m bench.align_judge --model smollm2 --adapter DPO_RUN --ref-adapter SFT_RUN
    python -m bench.align_judge --model smollm2 --adapter GRPO_RUN --no-prefs

Last line: one JSON object with those figures, n, seconds and a few samples.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from bench.tang_quatrains_eval import (DEFAULT_HELDOUT, asked_form, is_quatrain, load,
                                       load_conversations, replies)
from glassformer.cli.common import blas_sized_to_free_cores
from glassformer.tasks.preferences import preference_accuracy
from glassformer.train.rewards.tang_form import distinct_share

DATA = DEFAULT_HELDOUT.parent
TEMPERATURE = 0.7   # the sampling temperature for judging


def training_poems(path: Path) -> set[str]:
    """Every assistant reply of a chat JSONL file, stripped."""
    poems = set()
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                for message in json.loads(line)["messages"]:
                    if message["role"] == "assistant":
                        poems.add(message["content"].strip())
    return poems


def scores(conversations, texts, poems) -> dict:
    formed, distinct, copied = [], [], []
    for messages, text in zip(conversations, texts):
        length, _ = asked_form(messages[0]["content"])
        formed.append(is_quatrain(text, length))
        distinct.append(distinct_share(text))
        copied.append(text.strip() in poems)
    return {"well_formed": float(np.mean(formed)),
            "distinct_median": float(np.median(distinct)),
            "copied": float(np.mean(copied))}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2", help="base model (name or path)")
    parser.add_argument("--adapter", default=None, help="LoRA adapter folder (a finetune run)")
    parser.add_argument("--ref-adapter", default=None,
                        help="reference adapter for the preference accuracy (a DPO run's start)")
    parser.add_argument("--heldout", default=str(DEFAULT_HELDOUT), help="held-out chat JSONL")
    parser.add_argument("--train", default=str(DATA / "tang_sft.jsonl"),
                        help="training chat JSONL, for the verbatim-copy check")
    parser.add_argument("--prefs", default=str(DATA / "tang_prefs_heldout.jsonl"),
                        help="held-out preference pairs")
    parser.add_argument("--no-prefs", action="store_true", help="skip the preference accuracy")
    parser.add_argument("--n", type=int, default=100, help="prompts judged (the file's first n)")
    parser.add_argument("--pairs", type=int, default=None,
                        help="preference pairs scored (default: the whole file)")
    parser.add_argument("--batch", type=int, default=20, help="prompts generated together")
    parser.add_argument("--max-new-tokens", type=int, default=96, help="reply length cap")
    parser.add_argument("--seed", type=int, default=0, help="sampling seed")
    args = parser.parse_args(argv)
    with blas_sized_to_free_cores():
        return judge(args)


def judge(args) -> int:
    start = time.perf_counter()
    model = load(args.model, args.adapter)
    conversations = load_conversations(Path(args.heldout), args.n)
    texts = replies(model, conversations, batch=args.batch, max_new_tokens=args.max_new_tokens,
                    temperature=TEMPERATURE, seed=args.seed)
    result = {"model": args.model, "adapter": args.adapter, "n": len(texts),
              **scores(conversations, texts, training_poems(Path(args.train)))}
    if args.adapter and not args.no_prefs:
        base = load(args.model, None)
        accuracy = preference_accuracy(base, args.adapter, args.prefs,
                                       ref_adapter=args.ref_adapter, limit=args.pairs)
        result["dpo_heldout_accuracy"] = accuracy.accuracy
        result["dpo_heldout_margin"] = accuracy.margin
    result["seconds"] = round(time.perf_counter() - start, 1)
    result["samples"] = [{"prompt": c[0]["content"], "reply": t}
                         for c, t in zip(conversations[:4], texts[:4])]
    print(json.dumps(result, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
