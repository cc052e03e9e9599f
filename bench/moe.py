"""Mixture of Experts against the dense model with as many parameters per token, and against torch.

Five `glassformer train` runs on Tiny Shakespeare, one after another in this process, each for
--iters iterations (one rank; the recipe's schedule scaled to --iters: warmup iters / 20, the
cosine decay ending at --iters, as the 2,000-iteration recipe's 100 and 2,000):

    dense   --arch llama                   the default recipe's dense LLaMA (L=4, H=4, C=128)
    aux     --arch moe                     8 experts, 2 per token, the auxiliary balance loss of
                                           each layer (the default)
    aux-pooled  --balance aux-pooled       the same, one loss pooled over the layers
                                           (transformers' load_balancing_loss_func)
    bias    --arch moe --balance bias      DeepSeek-V3's loss-free bias update
    none    --arch moe --balance none      the same model, no balancing at all

For each: the parameters a token uses, the last val loss, the median ms/iter, and for the MoE
runs the final expert load (max over layers of the busiest expert's share / the even share 1/E).
Then one MoE training step (forward, backward with the pooled auxiliary loss, the one
transformers computes, clip, AdamW) against transformers' Qwen3MoeForCausalLM on the same weights (our model saved with save_pretrained and
loaded by transformers) and the same batches, in blocks of steps alternated between the two,
with the same thread count; their first-step losses are printed side by side.

    python -m bench.moe [--iters 300] [--steps 20] [--data ../shared/data/tinyshakespeare.txt]
                        [--runs dense,aux,aux-pooled,bias,none]

(--runs picks some of the five; every run starts from the same seed, so a row does not depend
on which others ran beside it, only its ms/iter on how busy the machine was.)

Last line: one JSON object with every figure.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from glassformer.blas import blas_threads
from glassformer.cli import main
from glassformer.io.checkpoint import read_train_log
from glassformer.io.pretrained import load_pretrained, save_pretrained
from glassformer.models.model import Model
from glassformer.models.registry import family
from glassformer.train.loop import TrainConfig
from glassformer.train.objectives.moe_next_token import MOE_NEXT_TOKEN, MoESettings
from glassformer.train.optim import adamw_init
from glassformer.train.recipes import MOE, model_config
from glassformer.train.step import train_step

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "tinyshakespeare.txt"
RUNS = {"dense": ["--arch", "llama"], "aux": ["--arch", "moe"],
        "aux-pooled": ["--arch", "moe", "--balance", "aux-pooled"],
        "bias": ["--arch", "moe", "--balance", "bias"],
        "none": ["--arch", "moe", "--balance", "none"]}
BLOCK = 5            # torch comparison: steps per block, blocks alternated between the two
# Both sides on one thread: OpenMP and OpenBLAS threads spin for a while after their work, so
# with two or more, each side's idle threads would slow the other's next block.
THREADS = 1


def active_params(run_dir: Path) -> int:
    """Parameters one token uses: all but the experts it was not sent to."""
    model = load_pretrained(run_dir)
    total = model.num_params()
    moe = model.cfg.block_config().moe
    if moe is None:
        return total
    idle = moe.n_experts - moe.experts_per_token
    per_expert = 3 * model.cfg.d_model * moe.expert_d_ff
    sparse = model.cfg.n_layer - len(moe.dense_layers)
    return total - sparse * idle * per_expert


def train_run(name: str, flags: list[str], data: Path, iters: int, out: Path) -> dict:
    run = out / name
    argv = ["train", "--data", str(data), *flags, "--out", str(run), "--max-iters", str(iters),
            "--lr-decay-iters", str(iters), "--warmup-iters", str(max(1, iters // 20)),
            "--eval-interval", str(iters), "--workers", "1",
            "--no-progress"]
    if main(argv) != 0:
        raise SystemExit(f"glassformer {' '.join(argv)} failed")
    log = read_train_log(run)
    last = [r for r in log if "val_loss" in r][-1]
    result = {"val_loss": last["val_loss"],
              "ms_per_iter": statistics.median(r["ms_per_iter"] for r in log
                                               if "ms_per_iter" in r),
              "active_params": active_params(run)}
    if "expert_load" in last:
        load = np.array(last["expert_load"])                                  # (L, E)
        result["max_load_over_mean"] = float((load.max(axis=1) * load.shape[1]).max())
        result["expert_load"] = last["expert_load"]
    return result


def batches(data: Path, n: int, vocab: dict, batch: int, block: int):
    text = data.read_text(encoding="utf-8")
    ids = np.array([vocab[ch] for ch in text], dtype=np.int64)
    rng = np.random.default_rng(0)
    starts = rng.integers(0, len(ids) - block - 1, (n, batch))
    return [(np.stack([ids[s:s + block] for s in row]),
             np.stack([ids[s + 1:s + block + 1] for s in row])) for row in starts]


def torch_side(folder: Path, train_cfg: TrainConfig):
    """transformers' model on our weights, and one training step of it (aux loss included)."""
    import torch
    import transformers
    torch.set_num_threads(THREADS)
    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    model.config.router_aux_loss_coef = train_cfg.objective_settings.router_aux_coef
    model.train()
    optim = torch.optim.AdamW(model.parameters(), lr=train_cfg.lr,
                              betas=(train_cfg.beta1, train_cfg.beta2),
                              weight_decay=train_cfg.weight_decay)

    def step(x, y) -> float:
        out = model(input_ids=torch.from_numpy(x), output_router_logits=True)
        lm = torch.nn.functional.cross_entropy(out.logits.flatten(0, 1),
                                               torch.from_numpy(y).flatten())
        loss = lm + train_cfg.objective_settings.router_aux_coef * out.aux_loss
        optim.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), train_cfg.grad_clip)
        optim.step()
        return lm.item()
    return step


def versus_torch(data: Path, steps: int, out: Path) -> dict:
    text = data.read_text(encoding="utf-8")
    chars = sorted(set(text))
    vocab = {ch: i for i, ch in enumerate(chars)}
    train_cfg = TrainConfig(objective="moe-next-token",
                            objective_settings=MoESettings(balance="aux-pooled"))     # transformers' loss, the same numbers
    cfg = model_config(MOE.model, len(chars), train_cfg.block_size)
    moe = family("moe")
    params = moe.init_params(cfg, np.random.default_rng(0))
    folder = save_pretrained(Model(cfg, {k: v.copy() for k, v in params.items()}, None),
                             out / "hf")
    torch_step = torch_side(folder, train_cfg)
    opt = adamw_init(params)
    work = batches(data, steps, vocab, train_cfg.batch_size, train_cfg.block_size)

    def ours(x, y) -> float:
        nonlocal opt
        loss, opt, _ = train_step(moe, params, cfg, [(x, y)], opt, rng=None,
                               grad_clip=train_cfg.grad_clip, lr=train_cfg.lr,
                               beta1=train_cfg.beta1, beta2=train_cfg.beta2,
                               weight_decay=train_cfg.weight_decay, objective=MOE_NEXT_TOKEN,
                               train_cfg=train_cfg)
        return loss
    times = {"glassformer": [], "torch": []}
    first = {}
    with blas_threads(THREADS):
        for start in range(0, steps, BLOCK):
            for name, fn in (("glassformer", ours), ("torch", torch_step)):
                for x, y in work[start:start + BLOCK]:
                    began = time.perf_counter()
                    loss = fn(x, y)
                    times[name].append((time.perf_counter() - began) * 1e3)
                    first.setdefault(name, loss)
    ms = {name: statistics.median(values) for name, values in times.items()}
    return {"glassformer_ms_per_step": ms["glassformer"], "torch_ms_per_step": ms["torch"],
            "ratio": ms["glassformer"] / ms["torch"],
            "first_loss": first}


def run(args) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        runs = {name: train_run(name, RUNS[name], args.data, args.iters, out)
                for name in args.runs}
        step = versus_torch(args.data, args.steps, out)
    return {"iters": args.iters, "runs": runs, "moe_step_vs_torch": step,
            "note": "ms figures measured on a shared machine: compare the ratios"}


def print_table(result: dict) -> None:
    print(f"{'run':<12}{'active params':>14}{'val loss':>10}{'ms/iter':>10}{'max load/mean':>15}")
    for name, row in result["runs"].items():
        load = row.get("max_load_over_mean")
        shown = f"{load:.2f}" if load is not None else "-"
        print(f"{name:<12}{row['active_params']:>14,}{row['val_loss']:>10.4f}"
              f"{row['ms_per_iter']:>10.1f}{shown:>15}")
    step = result["moe_step_vs_torch"]
    print(f"MoE step: glassformer {step['glassformer_ms_per_step']:.1f} ms, torch "
          f"{step['torch_ms_per_step']:.1f} ms, ratio {step['ratio']:.2f}x; first-step LM loss "
          f"{step['first_loss']['glassformer']:.4f} vs {step['first_loss']['torch']:.4f}")


def main_bench() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=300, help="training iterations per run")
    parser.add_argument("--steps", type=int, default=20, help="steps timed against torch")
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="training text")
    parser.add_argument("--runs", default=",".join(RUNS),
                        help=f"comma-separated runs to train (of {', '.join(RUNS)})")
    args = parser.parse_args()
    args.runs = [name.strip() for name in args.runs.split(",") if name.strip()]
    unknown = [name for name in args.runs if name not in RUNS]
    if unknown:
        sys.exit(f"--runs: unknown run {unknown[0]!r}; expected some of {', '.join(RUNS)}")
    if not args.data.is_file():
        sys.exit(f"{args.data} not found")
    result = run(args)
    print_table(result)
    print(json.dumps(result))


if __name__ == "__main__":
    main_bench()
