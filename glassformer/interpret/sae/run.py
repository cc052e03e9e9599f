"""`glassformer sae train` and `sae eval` as library calls: from a model, a hook and a text to a
saved, evaluated SAE.

train: the text's first `tokens` tokens (in windows of `context`) are the training rows, the
`eval_tokens` after them the held-out ones; every setting is checked before the model runs.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from glassformer.errors import GlassformerError
from glassformer.interpret.sae.activations import hook_width
from glassformer.interpret.sae.evaluate import evaluate_sae
from glassformer.interpret.sae.model import SAEConfig
from glassformer.interpret.sae.saelens_folder import CFG_FILE, load_sae, save_sae
from glassformer.interpret.sae.stream import gather, windows
from glassformer.interpret.sae.train import SAETrainConfig, fold_scale, train_sae
from glassformer.models.model import Model

# Characters of text tokenised per token wanted, before falling back to the whole text
CHARS_PER_TOKEN = 8


@dataclass(frozen=True)
class StreamConfig:
    tokens: int = 16384             # training positions read from the text
    eval_tokens: int = 1024         # held-out positions for the metrics
    context: int = 128              # tokens per window the model reads
    rows_per_forward: int = 4       # windows per forward

    def __post_init__(self):
        for name, value in asdict(self).items():
            if value < 1:
                raise GlassformerError(f"--{name.replace('_', '-')} must be >= 1, got {value}")


def text_ids(model: Model, text: str, wanted: int) -> np.ndarray:
    """The token ids of (enough of) the text: a prefix of ~wanted * 8 characters, else all."""
    if model.tokenizer is None:
        raise GlassformerError("the model came without a tokenizer; an SAE reads its text")
    head = text[:wanted * CHARS_PER_TOKEN]
    ids = model.tokenizer.encode(head)
    if len(ids) < wanted and len(head) < len(text):
        ids = model.tokenizer.encode(text)
    return np.asarray(ids, dtype=np.int64)


def check_out_folder(out: str | Path) -> Path:
    """An output folder that is absent, empty, or an SAE folder (overwritten)."""
    out = Path(out)
    if out.exists() and (not out.is_dir() or (any(out.iterdir())
                                              and not (out / CFG_FILE).is_file())):
        raise GlassformerError(f"{out} exists and is not an SAE folder; pick a new --out")
    return out


def train_and_save(model: Model, model_name: str, text: str, hook: str, cfg: SAEConfig,
                   tcfg: SAETrainConfig, scfg: StreamConfig, out: str | Path, *, seed: int,
                   log: Callable[[str, dict], None]) -> dict:
    """Gather, train, fold the input scale, evaluate, save. log(kind, info): "gather",
    "train" and "eval" events for the command's progress lines. Returns the report."""
    width = hook_width(model, hook)                       # a bad hook fails before any work
    out = check_out_folder(out)
    if cfg.d_in != width:
        raise GlassformerError(f"d_in {cfg.d_in} is not the width of {hook}, {width}")
    ids = text_ids(model, text, scfg.tokens + scfg.eval_tokens)
    train_windows = windows(ids, scfg.context, scfg.tokens)
    eval_windows = windows(ids, scfg.context, scfg.eval_tokens, offset=train_windows.size)
    gathered = gather(model, train_windows, hook, rows_per_forward=scfg.rows_per_forward,
                      progress=lambda done, total: log("gather", {"windows": done,
                                                                  "of": total}))
    rng = np.random.default_rng(seed)
    params, scale, lines = train_sae(gathered.rows, cfg, tcfg, rng,
                                     log=lambda line: log("train", line))
    params = fold_scale(params, scale)
    metrics = evaluate_sae(model, params, cfg, hook, eval_windows,
                           rows_per_forward=scfg.rows_per_forward)
    log("eval", metrics)
    report = {"model": model_name, "hook": hook, "sae": asdict(cfg), "train": asdict(tcfg),
              "stream": asdict(scfg), "seed": seed, "input_scale": scale,
              "train_rows": int(gathered.rows.shape[0]), "sinks_dropped": gathered.sinks,
              "last_train_log": lines[-1], "eval": metrics}
    metadata = {"model_name": model_name, "hook_name": hook, "hook_head_index": None,
                "context_size": scfg.context, "prepend_bos": False,
                "dataset_path": None, "glassformer": report}
    save_sae(out, params, cfg, metadata)
    return {**report, "out": str(out)}


def evaluate_folder(model: Model, folder: str | Path, text: str, hook: str | None,
                    scfg: StreamConfig, *, skip_tokens: int = 0) -> dict:
    """The metrics of a saved SAE (ours or SAELens's) on eval_tokens tokens of the text from
    token skip_tokens (a `train` run's held-out ones: skip its --tokens); the hook defaults to
    the folder's metadata hook_name."""
    if skip_tokens < 0:
        raise GlassformerError(f"--skip-tokens must be >= 0, got {skip_tokens}")
    params, cfg, metadata = load_sae(folder)
    hook = hook or metadata.get("hook_name")
    if not hook:
        raise GlassformerError(f"{folder} names no hook_name; pass --hook")
    width = hook_width(model, hook)
    if cfg.d_in != width:
        raise GlassformerError(f"{folder} reads width {cfg.d_in}; {hook} has width {width}")
    ids = text_ids(model, text, skip_tokens + scfg.eval_tokens)
    eval_windows = windows(ids, scfg.context, scfg.eval_tokens, offset=skip_tokens)
    metrics = evaluate_sae(model, params, cfg, hook, eval_windows,
                           rows_per_forward=scfg.rows_per_forward)
    return {"sae": str(folder), "hook": hook, "arch": cfg.arch, "d_sae": cfg.d_sae, **metrics}
