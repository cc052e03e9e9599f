"""A 3-turn chat on a Qwen3.5-shaped hybrid: turn-boundary checkpoints of the state against
re-reading the whole conversation every turn (what a server does when a recurrent state cannot be
cut back: llama.cpp #20225).

Both sides are glassformer (the reference is the start-over policy, not another library): a
ChatSession that keeps its cache and checkpoints (tasks/chat_checkpoints.py), and for each turn a
fresh session given the same history, which prefills every id. Per turn: ids prefilled, time to
the first new token, and whether the replies agree (greedy). The model is random (no download)
with a byte-level tokenizer and Qwen3.5's own nothink template (TRL's copy where it is installed,
else the same layout written out); its shape is a small Qwen3.5 (C=512, 8 layers, one full-attention
layer in 4). Also by arithmetic: what one checkpoint costs for transformers' Qwen3_5TextConfig
defaults (bench/hybrid_cache_bytes.py's shape) in bf16 and float32.

    python bench/hybrid_chat.py [--first-turn-tokens 600] [--threads N]

Last line: one JSON object.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import time
from pathlib import Path


def template():
    from glassformer.tokenizers.chat_template import ChatTemplate

    spec = importlib.util.find_spec("trl")
    path = Path(spec.origin if spec else ".").parent / "chat_templates" / "qwen3_5_nothink.jinja"
    if path.is_file():
        return ChatTemplate(path.read_text(encoding="utf-8"), {}), "trl qwen3_5_nothink.jinja"
    return ChatTemplate(
        "{% for message in messages %}{% if message['role'] == 'assistant' %}"
        "{{ '<|im_start|>assistant\n' + message['content'].split('</think>')[-1].lstrip('\n') }}"
        "{{ '<|im_end|>\n' }}{% else %}"
        "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
        "{% endif %}{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n<think>\n\n</think>\n\n' }}"
        "{% endif %}", {}), "inline nothink layout"


def model():
    import numpy as np

    from glassformer.models import qwen3_next
    from glassformer.models.model import Model
    from glassformer.models.qwen3_5 import Qwen35Config
    from glassformer.tokenizers.bpe import BPETokenizer

    specials = {"<|im_start|>": 128, "<|im_end|>": 129, "<|endoftext|>": 130, "<think>": 131,
                "</think>": 132}
    tokenizer = BPETokenizer({bytes([b]): b for b in range(128)}, [], special_tokens=specials)
    cfg = Qwen35Config(vocab_size=133, max_seq_len=4096, n_layer=8, n_head=8, n_kv_head=2,
                       d_model=512, head_dim=64, d_ff=1536, full_layers=(3, 7),
                       linear_k_heads=4, linear_v_heads=8, linear_k_head_dim=64,
                       linear_v_head_dim=64)
    params = qwen3_next.init_params(cfg, np.random.default_rng(0))
    params = {k: (v * 4.0).astype(np.float32) if v.ndim == 2 else v for k, v in params.items()}
    return Model(cfg, params, tokenizer)


def checkpoint_bytes_at_qwen35_defaults() -> dict:
    """One StateCheckpoint of transformers' Qwen3_5TextConfig defaults, by arithmetic."""
    from glassformer.models import qwen3_next
    from glassformer.models.qwen3_5 import Qwen35Config

    cfg = Qwen35Config(vocab_size=248320, max_seq_len=262144, n_layer=32, n_head=16, n_kv_head=4,
                       d_model=4096, head_dim=256, d_ff=12288,
                       full_layers=tuple(range(3, 32, 4)), linear_k_heads=16,
                       linear_v_heads=32, linear_k_head_dim=128, linear_v_head_dim=128)
    linear = cfg.n_layer - len(cfg.full_layers)
    floats = linear * qwen3_next.state_layout(cfg).floats_per_row()
    return {"linear_layers": linear, "bf16_MiB": round(floats * 2 / 2**20, 1),
            "float32_MiB": round(floats * 4 / 2**20, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--first-turn-tokens", type=int, default=600,
                        help="about how long the first message is (default 600)")
    parser.add_argument("--threads", type=int, default=None, help="BLAS threads")
    args = parser.parse_args()
    if args.threads:
        for name in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ[name] = str(args.threads)
    from glassformer.tasks.chat import ChatSession

    chat_template, template_name = template()
    lm = model()
    options = dict(temperature=0.0, max_new_tokens=16)
    words = "the quick brown fox jumps over the lazy dog while the cat sleeps. "
    messages = ["Summarise this: " + words * (args.first_turn_tokens // len(words)),
                "Who sleeps?", "And what does the fox do?"]
    session = ChatSession(lm, chat_template)
    turns = []
    for k, text in enumerate(messages):
        history = list(session.messages)
        start = time.perf_counter()
        kept = "".join(step.text for step in session.send(text, **options))
        kept_s = time.perf_counter() - start
        fresh = ChatSession(lm, chat_template, history)
        start = time.perf_counter()
        again = "".join(step.text for step in fresh.send(text, **options))
        fresh_s = time.perf_counter() - start
        turn, fresh_turn = session.turns[-1], fresh.turns[0]
        row = {"turn": k + 1, "prompt_tokens": turn.prompt_tokens,
               "prefilled": turn.prefilled_tokens, "reused_from": turn.reused_from,
               "start_over_prefilled": fresh_turn.prefilled_tokens,
               "first_token_s": round(turn.prefill_seconds, 3),
               "start_over_first_token_s": round(fresh_turn.prefill_seconds, 3),
               "first_token_ratio": round(turn.prefill_seconds / fresh_turn.prefill_seconds, 3),
               "turn_s": round(kept_s, 3), "start_over_turn_s": round(fresh_s, 3),
               "same_reply": kept == again, "checkpoint_bytes": turn.checkpoint_bytes}
        turns.append(row)
        print(f"turn {k + 1}: {turn.prompt_tokens} prompt ids, prefilled {turn.prefilled_tokens} "
              f"(from {turn.reused_from}) vs {fresh_turn.prefilled_tokens} starting over; first "
              f"token {turn.prefill_seconds:.3f} s vs {fresh_turn.prefill_seconds:.3f} s "
              f"({row['first_token_ratio']}x); same reply: {row['same_reply']}; "
              f"checkpoints hold {turn.checkpoint_bytes:,} bytes")
    defaults = checkpoint_bytes_at_qwen35_defaults()
    print(f"one checkpoint at Qwen3_5TextConfig defaults ({defaults['linear_layers']} linear "
          f"layers): {defaults['bf16_MiB']} MiB in bf16, {defaults['float32_MiB']} MiB in float32")
    print(json.dumps({"template": template_name, "turns": turns,
                      "checkpoint_at_qwen35_defaults": defaults}))


if __name__ == "__main__":
    main()
