"""One LoRA training step on SmolLM2-135M: glassformer's hand-written backward vs transformers + peft.

Both sides read the same dequantized weights (SmolLM2's Q4_1 GGUF dequantized by glassformer and
written once as a Hugging Face folder), put LoRA r=8, alpha=16 on q_proj and v_proj, and take
AdamW steps (lr 1e-3, no weight decay) on the same batch: 4 sequences x 128 tokens of the Tang
chat data with loss on the replies (train/datasets/chat.py), padded and masked alike. Each side runs
in its own process, one after the other, on every usable core (torch's intra-op threads;
glassformer's BLAS threads), so its peak RSS (VmHWM) is its own, loading included. --rounds N
runs the pair N times (ours, torch, ours, torch, ...) so a busy spell on a shared machine shows
as one round's ratio, not as the result.

    python -m bench.finetune [--iters 5] [--rounds 1]

(from the repository root, as a module.) Last line: one JSON object with glassformer_ms,
torch_ms, ratio (glassformer / torch; medians over the rounds), each round's ratio, and the peak
RSS of each side in MiB.
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data" / "tang_sft.jsonl"
BATCH, BLOCK, R, ALPHA, TARGETS, LR = 4, 128, 8, 16.0, ("q_proj", "v_proj"), 1e-3


def peak_rss_mib() -> float:
    """VmHWM of this process (ru_maxrss would include the parent's high-water mark)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024.0
    return float("nan")


def batch(model) -> tuple[np.ndarray, np.ndarray]:
    """(x, y), each (4, 128): the first Tang conversations, rendered and masked as finetune does
    (rows cut or padded to 128 tokens)."""
    from glassformer.tokenizers.chat_template import chat_template_of
    from glassformer.train.datasets.chat import encode_conversation, pad_rows
    template = chat_template_of(model.tokenizer)
    with open(DATA, encoding="utf-8") as f:
        conversations = [json.loads(next(f))["messages"] for _ in range(BATCH)]
    encoded = [encode_conversation(model.tokenizer, template, c) for c in conversations]
    data = pad_rows([ids for ids, _ in encoded], [mask for _, mask in encoded])
    ids = np.zeros((BATCH, BLOCK + 1), dtype=np.int64)
    targets = np.full((BATCH, BLOCK + 1), -100, dtype=np.int64)
    width = min(BLOCK + 1, data.ids.shape[1])
    ids[:, :width], targets[:, :width] = data.ids[:, :width], data.targets[:, :width]
    return ids[:, :BLOCK], targets[:, :BLOCK]


def read_batch(folder: str) -> tuple[np.ndarray, np.ndarray]:
    """The batch the parent wrote beside the weights (so neither side loads the other's code)."""
    with np.load(Path(folder) / "batch.npz", allow_pickle=False) as saved:
        return saved["x"], saved["y"]


def glassformer_side(folder: str, iters: int) -> list[float]:
    from glassformer.io.peft import LoraConfig, adapter_constants, init_adapters
    from glassformer.io.pretrained import load_pretrained
    from glassformer.train.optim import adamw_init
    from glassformer.train.objectives.sft import SFT
    from glassformer.train.step import train_step
    model = load_pretrained(folder)
    lora_cfg = LoraConfig(r=R, alpha=ALPHA, targets=TARGETS)
    adapters = init_adapters(model, lora_cfg, np.random.default_rng(0))
    frozen = {**model.params, **adapter_constants(adapters, lora_cfg)}
    opt = adamw_init(adapters)
    x, y = read_batch(folder)
    times = []
    for _ in range(iters + 1):   # the first step warms up
        start = time.perf_counter()
        _, opt, _ = train_step(model.family, adapters, model.cfg, [(x, y)], opt, rng=None,
                            grad_clip=0.0, lr=LR, weight_decay=0.0, objective=SFT,
                            frozen=frozen)
        times.append((time.perf_counter() - start) * 1e3)
    return times[1:]


def torch_side(folder: str, iters: int, threads: int) -> list[float]:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM
    torch.set_num_threads(threads)
    x, y = read_batch(folder)
    model = AutoModelForCausalLM.from_pretrained(folder, torch_dtype=torch.float32)
    model = get_peft_model(model, LoraConfig(r=R, lora_alpha=ALPHA, lora_dropout=0.0,
                                             target_modules=list(TARGETS)))
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=LR,
                            weight_decay=0.0)
    x_t, y_t = torch.from_numpy(x), torch.from_numpy(y)
    times = []
    for _ in range(iters + 1):
        start = time.perf_counter()
        logits = model(input_ids=x_t).logits                            # (B, T, V)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                 y_t.reshape(-1), ignore_index=-100)
        opt.zero_grad()
        loss.backward()
        opt.step()
        times.append((time.perf_counter() - start) * 1e3)
    return times[1:]


def child(side: str, folder: str, iters: int) -> None:
    from glassformer.train.distributed import usable_cores
    if side == "glassformer":
        times = glassformer_side(folder, iters)
    else:
        times = torch_side(folder, iters, usable_cores())
    print(json.dumps({"side": side, "ms": statistics.median(times), "times": times,
                      "peak_rss_mib": peak_rss_mib()}))


def run_child(side: str, folder: str, iters: int) -> dict:
    done = subprocess.run([sys.executable, "-m", "bench.finetune", "--child", side,
                           "--folder", folder, "--iters", str(iters)],
                          cwd=ROOT, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"the {side} side failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=5, help="timed steps per side")
    parser.add_argument("--rounds", type=int, default=1,
                        help="pairs of runs (ours, torch), alternating")
    parser.add_argument("--child", choices=["glassformer", "torch"], help=argparse.SUPPRESS)
    parser.add_argument("--folder", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.folder, args.iters)
        return
    from glassformer.io.named_models import load_model
    from glassformer.io.pretrained import save_pretrained
    with tempfile.TemporaryDirectory() as folder:
        model = load_model("smollm2")
        save_pretrained(model, folder)   # the dequantized weights, once
        x, y = batch(model)
        np.savez(Path(folder) / "batch.npz", x=x, y=y)
        del model
        rounds = []
        for _ in range(args.rounds):
            rounds.append((run_child("glassformer", folder, args.iters),
                           run_child("torch", folder, args.iters)))
    for pair in rounds:
        for record in pair:
            print(f"{record['side']:12s} {record['ms']:9.1f} ms/step   peak RSS "
                  f"{record['peak_rss_mib']:7.1f} MiB   steps {[round(t) for t in record['times']]}")
    ours_ms = statistics.median(ours["ms"] for ours, _ in rounds)
    torch_ms = statistics.median(theirs["ms"] for _, theirs in rounds)
    print(json.dumps({"glassformer_ms": round(ours_ms, 1), "torch_ms": round(torch_ms, 1),
                      "ratio": round(ours_ms / torch_ms, 3),
                      "round_ratios": [round(ours["ms"] / theirs["ms"], 3)
                                       for ours, theirs in rounds],
                      "glassformer_peak_rss_mib": round(max(o["peak_rss_mib"] for o, _ in rounds), 1),
                      "torch_peak_rss_mib": round(max(t["peak_rss_mib"] for _, t in rounds), 1),
                      "batch": [BATCH, BLOCK], "r": R, "targets": list(TARGETS)}))


if __name__ == "__main__":
    main()
