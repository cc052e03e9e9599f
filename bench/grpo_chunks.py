"""GRPO's update in chunks of rows: peak memory and time of one update (forward + backward of
the completions, train/objectives/grpo.py rollout_loss_and_grads) with every row in one forward
against the default chunks (row_chunks: LOGITS_CHUNK_BYTES of logits a chunk), side by side.

The case: SmolLM2-135M's shapes (d_model 576, 9 heads / 3 KV heads, d_ff 1536, its 49,152-entry
vocabulary, tied head), --layers of its 30 layers, random weights, LoRA r 16 on all seven
projections (the recipe's), and the GRPO recipe's update batch: 2 prompts x 8 completions,
47 prompt ids + 64 completion ids a row (111 positions). Each mode runs in a process of its own
under /usr/bin/time -v, whose "Maximum resident set size" is the peak.

    python -m bench.grpo_chunks [--layers 2]

Last line: one JSON object with each mode's peak RSS (MiB) and update time (s), and the ratios
chunked / one forward.
"""
from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import time

import numpy as np

from glassformer.io.peft import LoraConfig, adapter_constants, init_adapters
from glassformer.models import llama
from glassformer.models.model import Model
from glassformer.train.loop import TrainConfig
from glassformer.train.objectives.grpo import GRPOSettings
from glassformer.train.objectives.grpo import rollout_loss_and_grads, rollout_of

ROWS, PROMPT, COMPLETION = 16, 47, 64      # the recipe's 2 prompts x 8, ~111 ids a row
TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
PEAK = re.compile(r"Maximum resident set size \(kbytes\): (\d+)")


def update_once(layers: int, chunk_rows: int | None) -> float:
    """Seconds of one update on the bench's case."""
    rng = np.random.default_rng(0)
    cfg = llama.LlamaConfig(vocab_size=49_152, max_seq_len=128, n_layer=layers, n_head=9,
                            n_kv_head=3, d_model=576, d_ff=1536, tie_embeddings=True)
    model = Model(cfg, llama.init_params(cfg, rng))
    lora_cfg = LoraConfig(r=16, alpha=32.0, targets=TARGETS)
    adapters = init_adapters(model, lora_cfg, rng)
    adapters = {key: value + np.float32(0.01) for key, value in adapters.items()}   # B != 0
    frozen = {**model.params, **adapter_constants(adapters, lora_cfg)}
    lengths = rng.integers(COMPLETION // 2, COMPLETION + 1, ROWS)
    rollout = rollout_of(rng.integers(0, 49_152, (ROWS, PROMPT)), np.ones((ROWS, PROMPT), bool),
                         rng.integers(0, 49_152, (ROWS, COMPLETION)),
                         np.arange(COMPLETION)[None, :] < lengths[:, None])
    train_cfg = TrainConfig(objective="grpo",
                            objective_settings=GRPOSettings(max_completion_tokens=COMPLETION))
    start = time.perf_counter()
    rollout_loss_and_grads(llama, adapters, cfg, rollout, rng.standard_normal(ROWS),
                           frozen=frozen, train_cfg=train_cfg, chunk_rows=chunk_rows)
    return time.perf_counter() - start


def measured(layers: int, chunk_rows: int) -> dict:
    """One mode in a child process under /usr/bin/time -v: peak RSS (MiB) and seconds."""
    done = subprocess.run(["/usr/bin/time", "-v", sys.executable, "-m", "bench.grpo_chunks",
                           "--layers", str(layers), "--child", str(chunk_rows)],
                          capture_output=True, text=True, check=True)
    seconds = json.loads(done.stdout.strip().splitlines()[-1])["seconds"]
    return {"peak_mib": round(int(PEAK.search(done.stderr).group(1)) / 1024), "seconds":
            round(seconds, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=2, help="SmolLM2 layers (of 30)")
    parser.add_argument("--child", type=int, default=None,
                        help="(internal) run one update with this many rows a chunk; 0: the "
                             "default chunks")
    args = parser.parse_args()
    if args.child is not None:
        print(json.dumps({"seconds": update_once(args.layers, args.child or None)}))
        return
    whole = measured(args.layers, ROWS)
    chunked = measured(args.layers, 0)
    print(f"one forward of {ROWS} rows: {whole}; default chunks: {chunked}")
    print(json.dumps({"layers": args.layers, "one_forward": whole, "chunked": chunked,
                      "peak_ratio": round(chunked["peak_mib"] / whole["peak_mib"], 3),
                      "time_ratio": round(chunked["seconds"] / whole["seconds"], 3)}))


if __name__ == "__main__":
    main()
