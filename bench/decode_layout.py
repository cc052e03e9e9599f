"""Decode speed of the same weights in the layout before issue 33 and in models/layout.py's.

Both models run in this process, their decode runs alternating (a shared machine disturbs both
alike), BLAS at the CLI's free-core rule, greedy, tokens/s after the first token (the prefill):
    GPT-2-124M shape   before: random weights row-major, q/k/v and the MLP unpacked (what
                       bench/generate.py built); after: laid out (q|k|v packed)
    SmolLM2-135M       before: every matrix a column-major view of its own (out, in) array (how
                       the GGUF loaded); after: as it loads now (packed, row-major)

    python bench/decode_layout.py [--rounds 4] [--new-tokens 33]

Last line: one JSON object per model: best and median tokens/s of each, and after / before.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from generate import CONFIG, decode_tok_s_ours, our_model  # noqa: E402  (bench/generate.py)

from glassformer.blas import blas_threads, free_cores
from glassformer.io.named_models import load_model
from glassformer.models import gpt2
from glassformer.models.model import Model


def pair(name: str):
    """(model before, model after, prompt) with the same weights."""
    if name == "gpt2":
        cfg = gpt2.GPT2Config(**CONFIG, activation="gelu_tanh")
        before = Model(cfg, gpt2.init_params(cfg, np.random.default_rng(0)))
        prompt = np.random.default_rng(2).integers(0, CONFIG["vocab_size"], (1, 32))
        return before, our_model(), prompt
    after = load_model("smollm2")
    columns = {key: np.ascontiguousarray(value.T).T if value.ndim == 2 and key != "tok_emb"
               else value for key, value in after.params.items()}     # (out, in) viewed (in, out)
    prompt = np.array([after.tokenizer.encode("The capital of France is")])
    return Model(after.cfg, columns, after.tokenizer), after, prompt


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=4, help="decode runs of each model")
    parser.add_argument("--new-tokens", type=int, default=33, help="tokens per decode run")
    args = parser.parse_args()
    result = {}
    for name in ("gpt2", "smollm2"):
        before, after, prompt = pair(name)
        runs = {"before": [], "after": []}
        with blas_threads(free_cores()):
            decode_tok_s_ours(before, prompt, 4), decode_tok_s_ours(after, prompt, 4)  # warm up
            for _ in range(args.rounds):
                for side, model in (("before", before), ("after", after)):
                    runs[side].append(decode_tok_s_ours(model, prompt, args.new_tokens))
        best = {side: max(tok_s) for side, tok_s in runs.items()}
        median = {side: float(np.median(tok_s)) for side, tok_s in runs.items()}
        result[name] = {"before_best_tok_s": round(best["before"], 2),
                        "after_best_tok_s": round(best["after"], 2),
                        "after_over_before_best": round(best["after"] / best["before"], 3),
                        "after_over_before_median": round(median["after"] / median["before"], 3)}
        print(name, result[name], flush=True)
        del before, after
    print(json.dumps(result))


if __name__ == "__main__":
    main()
