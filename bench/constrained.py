"""Constrained decoding's cost: time per token on SmolLM2-135M-Instruct with and without a JSON
schema's mask, and llguidance computing the same masks (the reference), in one run.

    python bench/constrained.py [--replies 4] [--max-new-tokens 64]

Each side writes --replies sampled replies (temperature 1.0, seeds 0..) to one chat prompt with
`generate` (batch 1, KV cache). "free" is the model alone; "cold" the schema's first replies, its
MaskTable new (every state's mask computed when first met); "warm" the same replies again on the
same table (the server keeps one per schema, so this is its steady state). llguidance's column is
the time it takes to compute the mask at every step of the warm replies (its own matcher, on the
tokenizer.json glassformer writes, whitespace_flexible false). Last line: one JSON object with the
ratios cold/free and warm/free (goal: warm <= 1.2) and the milliseconds per mask of both.
"""
from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np

from glassformer.generate.constrain import json_table, vocabulary_trie
from glassformer.generate.generate import generate
from glassformer.io.named_models import load_model
from glassformer.tasks.chat import ChatSession
from glassformer.tokenizers.chat_template import chat_template_of

SCHEMA = {"type": "object", "additionalProperties": False,
          "required": ["name", "age", "email", "tags", "address", "active"],
          "properties": {
              "name": {"type": "string", "maxLength": 24},
              "age": {"type": "integer", "minimum": 0, "maximum": 120},
              "email": {"type": "string", "maxLength": 32},
              "tags": {"type": "array", "items": {"type": "string", "enum": [
                  "admin", "editor", "viewer", "guest"]}, "maxItems": 3},
              "address": {"type": "object", "additionalProperties": False,
                          "required": ["city", "zip"],
                          "properties": {"city": {"type": "string", "maxLength": 16},
                                         "zip": {"type": "string", "pattern": "^[0-9]{5}$"}}},
              "active": {"type": "boolean"}}}


def replies(model, prompt, stop, args, table) -> tuple[list[list[int]], float]:
    """The replies' ids and the seconds per generated token (prefill left out: timed from the
    first token)."""
    written, seconds, tokens = [], 0.0, 0
    for seed in range(args.replies):
        ids, first = [], None
        for step in generate(model, np.array([prompt]), max_new_tokens=args.max_new_tokens,
                             temperature=1.0, seed=seed, stop=stop, constraint=table):
            now = time.perf_counter()
            first = first or now
            token = int(step[0])
            if token in stop:
                break
            ids.append(token)
        seconds += time.perf_counter() - first
        tokens += max(len(ids) - 1, 1)
        written.append(ids)
    return written, seconds / tokens


def llguidance_ms(model, written, stop) -> float | None:
    try:
        import llguidance
    except ImportError:
        return None
    with tempfile.TemporaryDirectory() as folder:
        path = model.tokenizer.save(Path(folder) / "tokenizer.json")
        theirs = llguidance.LLTokenizer(str(path), eos_token=stop[-1])
    grammar = llguidance.LLMatcher.grammar_from_json_schema(
        SCHEMA, defaults={"whitespace_flexible": False})
    seconds, masks = 0.0, 0
    for ids in written:
        matcher = llguidance.LLMatcher(theirs, grammar)
        for token in ids:
            start = time.perf_counter()
            matcher.compute_bitmask()
            seconds += time.perf_counter() - start
            masks += 1
            matcher.consume_token(token)
    return 1000 * seconds / max(masks, 1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--replies", type=int, default=4, help="replies per side")
    parser.add_argument("--max-new-tokens", type=int, default=64, help="tokens per reply")
    args = parser.parse_args()
    model = load_model("smollm2")
    session = ChatSession(model, chat_template_of(model.tokenizer))
    prompt = session.prompt_ids([{"role": "user", "content": "Describe a user as JSON."}])
    stop = session.stop_ids()
    trie = vocabulary_trie(model.tokenizer, model.cfg.vocab_size)
    _, free = replies(model, prompt, stop, args, None)
    table = json_table(SCHEMA, trie, stop, model.tokenizer.encode)
    _, cold = replies(model, prompt, stop, args, table)
    written, warm = replies(model, prompt, stop, args, table)
    masks = len(table.masks)
    start = time.perf_counter()
    for sid in list(table.masks):                     # our mask, computed afresh: its cost
        table.compute(sid)
    ours_ms = 1000 * (time.perf_counter() - start) / max(masks, 1)
    theirs_ms = llguidance_ms(model, written, stop)
    print(f"free  {1000 * free:8.1f} ms/token")
    print(f"cold  {1000 * cold:8.1f} ms/token  ({cold / free:.2f}x free; {masks} masks built)")
    print(f"warm  {1000 * warm:8.1f} ms/token  ({warm / free:.2f}x free)")
    print(f"one mask: glassformer {ours_ms:.2f} ms, llguidance "
          f"{'n/a' if theirs_ms is None else f'{theirs_ms:.3f} ms'}")
    print(json.dumps({"free_ms": 1000 * free, "cold_ms": 1000 * cold, "warm_ms": 1000 * warm,
                      "cold_over_free": cold / free, "warm_over_free": warm / free,
                      "mask_ms": ours_ms, "llguidance_mask_ms": theirs_ms,
                      "states": masks}))


if __name__ == "__main__":
    main()
