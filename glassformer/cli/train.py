"""`glassformer train`: train a GPT (or LLaMA-style) model from scratch on a text file."""
from __future__ import annotations

import sys
from functools import partial

from glassformer.cli.common import model_help
from glassformer.models.gpt2 import GPT2Config
from glassformer.models.llama import LlamaConfig
from glassformer.packaged import MODEL, resolve_path
from glassformer.train.loop import TrainConfig
from glassformer.train.progress import progress_printer
from glassformer.train.run import plot_loss_curve, run_training

NAME = "train"
HELP = "train a char-level GPT with hand-written backprop (defaults: nanoGPT's Shakespeare CPU recipe)"

# flag -> (TrainConfig field, type)
TRAIN_FLAGS = {
    "--block-size": ("block_size", int, "context length T of each training sequence"),
    "--batch-size": ("batch_size", int, "sequences per micro-batch B"),
    "--grad-accum": ("grad_accum", int, "micro-batches summed per optimizer step"),
    "--lr": ("lr", float, "peak learning rate"),
    "--min-lr": ("min_lr", float, "learning rate at the end of the cosine decay"),
    "--warmup-iters": ("warmup_iters", int, "iterations of linear warmup"),
    "--lr-decay-iters": ("lr_decay_iters", int, "iteration where the cosine decay reaches min-lr"),
    "--max-iters": ("max_iters", int, "optimizer steps in all"),
    "--weight-decay": ("weight_decay", float, "AdamW decoupled weight decay (matrices only)"),
    "--beta1": ("beta1", float, "AdamW beta1"),
    "--beta2": ("beta2", float, "AdamW beta2"),
    "--grad-clip": ("grad_clip", float, "clip the global gradient norm to this (0: off)"),
    "--eval-interval": ("eval_interval", int, "evaluate and checkpoint every N iterations"),
    "--eval-iters": ("eval_iters", int, "batches per train/val loss estimate"),
    "--workers": ("workers", int, "batch shards trained in parallel, one per CPU core "
                                  "(0: every usable core)"),
}


def add_arguments(parser) -> None:
    defaults = TrainConfig()
    parser.set_defaults(seed=defaults.seed)
    parser.add_argument("--data", default=None,
                        help="UTF-8 text file to train on (default: glassformer's own source, "
                             "no download)")
    parser.add_argument("--out", default="out", help="run folder for checkpoints and logs")
    parser.add_argument("--arch", choices=["gpt2", "llama"], default="gpt2",
                        help="model family to train from scratch")
    parser.add_argument("--init", default=None,
                        help=model_help("start from the weights and tokenizer of this causal LM "
                                        "(gpt2 or llama family)"))
    parser.add_argument("--resume", action="store_true",
                        help="continue the run in --out from its last checkpoint")
    parser.add_argument("--n-layer", type=int, default=4, help="transformer layers L")
    parser.add_argument("--n-head", type=int, default=4, help="attention heads H")
    parser.add_argument("--n-kv-head", type=int, default=None,
                        help="key/value heads K for --arch llama (default: n-head)")
    parser.add_argument("--d-model", type=int, default=128, help="model width C")
    parser.add_argument("--dropout", type=float, default=0.0, help="dropout probability")
    parser.add_argument("--bias", action="store_true",
                        help="use biases in linears and norms (nanoGPT's default is off)")
    for flag, (field, kind, text) in TRAIN_FLAGS.items():
        parser.add_argument(flag, type=kind, default=getattr(defaults, field),
                            help=f"{text} (default: {getattr(defaults, field)})")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def model_config(args, vocab_size: int):
    """The new model's config from the flags, once the char tokenizer knows vocab_size."""
    if args.arch == "llama":
        return LlamaConfig(vocab_size=vocab_size, max_seq_len=args.block_size,
                           n_layer=args.n_layer, n_head=args.n_head,
                           n_kv_head=args.n_kv_head or args.n_head, d_model=args.d_model,
                           d_ff=None, dropout=args.dropout)
    return GPT2Config(vocab_size=vocab_size, max_seq_len=args.block_size, n_layer=args.n_layer,
                      n_head=args.n_head, d_model=args.d_model, dropout=args.dropout,
                      bias=args.bias)


def run(args) -> int:
    init = None if args.init is None else str(resolve_path(args.init, MODEL))
    fields = {field: getattr(args, flag[2:].replace("-", "_"))
              for flag, (field, _, _) in TRAIN_FLAGS.items()}
    train_cfg = TrainConfig(seed=args.seed, **fields)
    with progress_printer(total=train_cfg.max_iters, enabled=not args.no_progress) as on_step:
        run_state, model_cfg = run_training(
            data=args.data, out_dir=args.out, model_cfg_for=partial(model_config, args),
            train_cfg=train_cfg, resume=args.resume, init=init, on_step=on_step)
    plot = plot_loss_curve(args.out)
    print(f"done: iter {run_state.it}, best val loss {run_state.best_val:.4f}; checkpoint in "
          f"{args.out}" + (f", loss curve {plot}" if plot else ""), file=sys.stderr)
    return 0
