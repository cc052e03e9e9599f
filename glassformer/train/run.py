"""A whole training run from a text file: tokenizer, token file, model, loop, plot.

This is what `glassformer train` calls. With no data file it trains on glassformer's own source
code (the .py files of the installed package), a corpus that is always there and is ours to use.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Callable

import numpy as np

from glassformer.errors import GlassformerError
from glassformer.io.checkpoint import load_checkpoint, read_train_log
from glassformer.io.pretrained import load_pretrained
from glassformer.models.registry import config_from_dict
from glassformer.tokenizers.char import CharTokenizer
from glassformer.tokenizers.load import load_tokenizer
from glassformer.train.data import prepare_tokens, read_text, split_train_val
from glassformer.train.loop import RunState, TrainConfig, new_run, resume_run, train

DEFAULT_CORPUS_NAME = "glassformer's own source code"


def default_corpus_path(out_dir: Path) -> Path:
    """Write the package's own source, concatenated in a fixed order, to out_dir/corpus.txt."""
    package = Path(__file__).resolve().parents[1]
    files = sorted(package.rglob("*.py"))
    text = "".join(f.read_text(encoding="utf-8") for f in files)
    path = out_dir / "default_corpus.txt"
    out_dir.mkdir(parents=True, exist_ok=True)
    if not path.is_file() or path.read_text(encoding="utf-8") != text:
        path.write_text(text, encoding="utf-8")
    return path


def _fingerprint(tokenizer_layout: dict) -> str:
    raw = json.dumps(tokenizer_layout, sort_keys=True, ensure_ascii=False).encode("utf-8")
    return hashlib.sha256(raw).hexdigest()[:16]


def _tokens(data_path: Path, out_dir: Path, tokenizer, layout: dict):
    tokens = prepare_tokens(data_path, out_dir / "tokens.npy", encode=tokenizer.encode,
                            vocab_size=tokenizer.vocab_size, fingerprint=_fingerprint(layout))
    return split_train_val(tokens)


def _tokenizer_layout(tokenizer, out_dir: Path) -> dict:
    """The tokenizer's own JSON (what a checkpoint stores as tokenizer.json)."""
    folder = out_dir / "tokenizer"
    path = tokenizer.save(folder)
    if path.name != "tokenizer.json":
        path = folder / "tokenizer.json"
    if not path.is_file():
        raise GlassformerError(f"the {type(tokenizer).__name__} cannot be stored as "
                               "tokenizer.json, so it cannot go into a checkpoint")
    return json.loads(path.read_text(encoding="utf-8"))


def _start_from(init: str | None, text: str, model_cfg_for):
    """(model config, params or None, tokenizer) for a new run."""
    if init is None:
        tokenizer = CharTokenizer.from_text(text)
        return model_cfg_for(tokenizer.vocab_size), None, tokenizer
    model = load_pretrained(init)
    if model.arch not in ("gpt2", "llama"):
        raise GlassformerError(f"--init needs a causal LM (gpt2 or llama), got {model.arch}")
    if model.tokenizer is None:
        raise GlassformerError(f"{init} has no tokenizer, so the data cannot be encoded for it")
    # fresh row-major float32 copies: the same layout a resumed run reads back from its checkpoint
    params = {key: np.ascontiguousarray(value, dtype=np.float32).copy()
              for key, value in model.params.items()}
    return model.cfg, params, model.tokenizer


def run_training(*, data: str | None, out_dir: str, model_cfg_for: Callable[[int], object],
                 train_cfg: TrainConfig, resume: bool = False, init: str | None = None,
                 on_step=None) -> tuple[RunState, object]:
    """Train (or resume) and return (final RunState, model config).

    model_cfg_for(vocab_size) builds the model config once the char tokenizer is known.
    init: a glassformer run/checkpoint, a Hugging Face folder or a .gguf file whose weights and
    tokenizer start a new run (fine-tuning).
    """
    out = Path(out_dir)
    if resume:
        ckpt = load_checkpoint(out)
        model_cfg = config_from_dict(ckpt.config)
        tokenizer = load_tokenizer(ckpt.path)
        layout = ckpt.tokenizer_json
        run = resume_run(ckpt)
        saved_cfg = TrainConfig(**ckpt.state["train_config"])
        if saved_cfg.batch_size != train_cfg.batch_size or saved_cfg.seed != train_cfg.seed:
            raise GlassformerError("--resume keeps the run's batch size and seed; got different "
                                   f"ones ({train_cfg.batch_size}, {train_cfg.seed}) than saved "
                                   f"({saved_cfg.batch_size}, {saved_cfg.seed})")
        data_path = Path(data) if data else Path(
            (out / "data_source.txt").read_text(encoding="utf-8").strip())
    else:
        if (out / "latest").exists():
            raise GlassformerError(f"{out} already holds a run; pass --resume to continue it or "
                                   "choose another --out")
        data_path = Path(data) if data else default_corpus_path(out)
        model_cfg, params, tokenizer = _start_from(init, read_text(data_path), model_cfg_for)
        layout = _tokenizer_layout(tokenizer, out)
        run = new_run(model_cfg, train_cfg, params)
        (out / "data_source.txt").write_text(str(data_path.resolve()) + "\n", encoding="utf-8")
    train_data, val_data = _tokens(data_path, out, tokenizer, layout)
    for split, part in (("train", train_data), ("val", val_data)):
        if len(part) < train_cfg.block_size + 1:
            raise GlassformerError(
                f"the {split} split of {data_path} has {len(part)} tokens, fewer than block size "
                f"{train_cfg.block_size} + 1; use a smaller --block-size or more data")
    run = train(model_cfg, train_cfg, run, train_data=train_data, val_data=val_data,
                out_dir=out, tokenizer_json=layout, on_step=on_step)
    return run, model_cfg


def plot_loss_curve(out_dir: str | Path) -> Path | None:
    """Write out_dir/loss.png from train_log.jsonl; None when matplotlib is not installed."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        from matplotlib import pyplot as plt
    except ImportError:
        return None
    records = read_train_log(out_dir)
    train_pts = [(r["iter"], r["train_loss"]) for r in records if "train_loss" in r]
    val_pts = [(r["iter"], r["val_loss"]) for r in records if "val_loss" in r]
    fig, ax = plt.subplots(figsize=(7, 4))
    if train_pts:
        ax.plot(*zip(*train_pts), label="train (batch)", linewidth=0.8, alpha=0.7)
    if val_pts:
        ax.plot(*zip(*val_pts), "o-", label="val")
    ax.set_xlabel("iteration")
    ax.set_ylabel("cross-entropy loss")
    ax.legend()
    ax.grid(alpha=0.3)
    path = Path(out_dir) / "loss.png"
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)
    return path
