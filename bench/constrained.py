"""Constrained decoding's cost: time per token on SmolLM2-135M-Instruct with and without a JSON
schema's mask, same prompt and same number of tokens, interleaved, in one run.

    python bench/constrained.py [--repeats 5] [--max-new-tokens 48] [--cases user,enum,nested]

Three schemas: "user" (6 fields: strings with maxLength, an integer with bounds, an enum array,
a nested object with a pattern), "enum" (a 1,000-value enum: the longest the schema subset
takes, schema.MAX_ENUM), "nested" (an array of objects holding objects, anyOf, numbers, a
local $ref). For each, the constrained replies of --repeats seeds are written once untimed
(their lengths; the kept table warmed), then --repeats rounds each time three replies to the same
prompt, sampled at temperature 1.0 with the round's seed and exactly as many tokens, in an order
that turns every round so a drift of the machine's load falls on all three:

    cold  the constrained reply on a new MaskTable: each state's mask is built when first met
          (`glassformer generate --json-schema`, a schema's first request to serve)
    warm  the same reply on the table kept across rounds (the server keeps one per schema)
    free  the model alone, no mask, no stop, the same number of tokens

Time per token is timed from the first token (prefill left out). Ratios are per round
(constrained / free of that round), the median reported. The wall ratio holds the load's
noise; "own" is the constraint's own work, timed by replaying the same tokens
through a new table (cold) and the kept one (warm): mask lookup + applying it to a logits row +
the automaton advanced by the chosen token's bytes, per token, over the free ms per token.
llguidance's column: its matcher computing the mask at every step of the warm replies (its
tokenizer from the tokenizer.json glassformer writes, whitespace_flexible false). Last line: JSON.
"""
from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from glassformer.generate.constrain import RowConstraint, advance_rows, json_table, mask_rows
from glassformer.generate.constrain import vocabulary_trie
from glassformer.generate.generate import generate
from glassformer.io.named_models import load_model
from glassformer.tasks.chat import ChatSession
from glassformer.tokenizers.chat_template import chat_template_of

USER = {"type": "object", "additionalProperties": False,
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
SCHEMA = USER                                    # the name earlier scripts import

ADJECTIVES = ("red blue green quiet rapid silent golden ancient bright calm dusty eager frozen "
              "gentle hollow icy jolly lucky misty noble proud rusty shiny tiny wild").split()
NOUNS = ("river harbor canyon meadow forest island valley summit desert lagoon glacier prairie "
         "orchard bridge castle market temple garden tower village beacon quarry ridge delta "
         "marsh grove cliff bay cove dune fjord heath knoll mesa oasis plain reef spring "
         "strait").split()
ENUM = {"type": "object", "additionalProperties": False, "required": ["place", "visits"],
        "properties": {"place": {"type": "string",
                                 "enum": [f"{a}_{n}" for a in ADJECTIVES for n in NOUNS]},
                       "visits": {"type": "integer", "minimum": 0, "maximum": 99}}}

NESTED = {"$defs": {"point": {"type": "object", "additionalProperties": False,
                              "required": ["x", "y"],
                              "properties": {"x": {"type": "number", "minimum": -90,
                                                   "maximum": 90},
                                             "y": {"type": "number"}}}},
          "type": "object", "additionalProperties": False, "required": ["route", "stops"],
          "properties": {
              "route": {"type": "string", "maxLength": 20},
              "stops": {"type": "array", "minItems": 1, "maxItems": 3, "items": {
                  "type": "object", "additionalProperties": False,
                  "required": ["name", "at", "kind"],
                  "properties": {
                      "name": {"type": "string", "maxLength": 12},
                      "at": {"$ref": "#/$defs/point"},
                      "kind": {"anyOf": [{"type": "string", "enum": ["bus", "tram", "ferry"]},
                                         {"type": "integer", "minimum": 1, "maximum": 9},
                                         {"type": "null"}]},
                      "open": {"type": "boolean"}}}}}}

CASES = {"user": (USER, "Describe a user as JSON."),
         "enum": (ENUM, "Name a place from the list and how often you visited it, as JSON."),
         "nested": (NESTED, "Describe a bus route with its stops as JSON.")}


def timed(model, prompt, stop, tokens: int, seed: int, table) -> tuple[list[int], float]:
    """One reply's ids and its seconds per token after the first. table None: the free
    model, exactly `tokens` tokens (no stop); else the constrained reply, until its value
    ends (or `tokens`)."""
    ids, first, last = [], None, None
    for step in generate(model, np.array([prompt]), max_new_tokens=tokens, temperature=1.0,
                         seed=seed, stop=stop if table is not None else None,
                         constraint=table):
        last = time.perf_counter()
        first = first or last
        ids.append(int(step[0]))
    return ids, (last - first) / max(len(ids) - 1, 1)


def own_ms(table, start: int, ids: list[int], vocab: int) -> float:
    """The constraint's own milliseconds per token replaying `ids` on `table` from `start`."""
    logits = np.zeros((1, vocab), dtype=np.float32)
    row = RowConstraint(table, start)
    began = time.perf_counter()
    for token in ids:
        mask_rows(logits, [row])
        advance_rows([row], np.array([token]))
    return 1000 * (time.perf_counter() - began) / max(len(ids), 1)


def run_case(model, session, trie, name: str, args) -> dict:
    schema, question = CASES[name]
    prompt = session.prompt_ids([{"role": "user", "content": question}])
    stop = session.stop_ids()
    new_table = lambda: json_table(schema, trie, stop, model.tokenizer.encode)   # noqa: E731
    kept = new_table()
    lengths = [len(timed(model, prompt, stop, args.max_new_tokens, seed, kept)[0])
               for seed in range(args.repeats)]            # untimed: each round's length
    found = {"cold": [], "warm": [], "free_ms": [], "own_cold_ms": [], "own_warm_ms": []}
    replies = []
    for round_ in range(args.repeats):
        sides = ("cold", "warm", "free")
        sides = sides[round_ % 3:] + sides[:round_ % 3]    # each side first in turn
        ms = {}
        for side in sides:
            table = {"cold": new_table(), "warm": kept, "free": None}[side]
            ids, ms[side] = timed(model, prompt, stop, lengths[round_], round_, table)
            if side == "cold":
                replies.append(ids)
        found["cold"].append(ms["cold"] / ms["free"])
        found["warm"].append(ms["warm"] / ms["free"])
        found["free_ms"].append(1000 * ms["free"])
    body = [[t for t in ids if t not in stop] for ids in replies]
    for ids in body:                                     # replayed: the constraint alone
        found["own_cold_ms"].append(own_ms(new_table(), kept.start, ids, model.cfg.vocab_size))
        found["own_warm_ms"].append(own_ms(kept, kept.start, ids, model.cfg.vocab_size))
    free_ms = statistics.median(found["free_ms"])
    result = {"case": name, "tokens": statistics.median(len(ids) for ids in replies),
              "free_ms": free_ms,
              "cold_over_free": statistics.median(found["cold"]),
              "warm_over_free": statistics.median(found["warm"]),
              "own_cold_ms": statistics.median(found["own_cold_ms"]),
              "own_warm_ms": statistics.median(found["own_warm_ms"]),
              "states": len(kept.states), "masks": len(kept.masks),
              "llguidance_mask_ms": llguidance_ms(model, schema, body, stop)}
    result["own_cold_over_free"] = 1 + result["own_cold_ms"] / free_ms
    result["own_warm_over_free"] = 1 + result["own_warm_ms"] / free_ms
    result["example"] = model.tokenizer.decode(body[0])
    return result


def llguidance_ms(model, schema, written, stop) -> float | None:
    try:
        import llguidance
    except ImportError:
        return None
    with tempfile.TemporaryDirectory() as folder:
        path = model.tokenizer.save(Path(folder) / "tokenizer.json")
        theirs = llguidance.LLTokenizer(str(path), eos_token=stop[-1])
    grammar = llguidance.LLMatcher.grammar_from_json_schema(
        schema, defaults={"whitespace_flexible": False})
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
    parser.add_argument("--repeats", type=int, default=5, help="interleaved rounds per phase")
    parser.add_argument("--max-new-tokens", type=int, default=48, help="tokens per reply")
    parser.add_argument("--cases", default=",".join(CASES), help="comma-separated: "
                        + ", ".join(CASES))
    args = parser.parse_args()
    model = load_model("smollm2")
    session = ChatSession(model, chat_template_of(model.tokenizer))
    trie = vocabulary_trie(model.tokenizer, model.cfg.vocab_size)
    results = []
    for name in args.cases.split(","):
        r = run_case(model, session, trie, name, args)
        results.append({k: v for k, v in r.items() if k != "example"})
        print(f"{name:7s} free {r['free_ms']:7.1f} ms/token, {r['tokens']:.0f} tokens | wall "
              f"cold {r['cold_over_free']:.3f}x warm {r['warm_over_free']:.3f}x | own cold "
              f"{r['own_cold_ms']:.2f} ms ({r['own_cold_over_free']:.3f}x) warm "
              f"{r['own_warm_ms']:.3f} ms ({r['own_warm_over_free']:.4f}x) | llguidance mask "
              f"{r['llguidance_mask_ms'] or float('nan'):.3f} ms | {r['states']} states, "
              f"{r['masks']} masks")
        print(f"        e.g. {r['example'][:100]}")
    worst = max(max(r["cold_over_free"], r["warm_over_free"]) for r in results)
    print(json.dumps({"cases": results, "worst_wall_ratio": worst,
                      "goal_le_1_2": worst <= 1.2}))


if __name__ == "__main__":
    main()
