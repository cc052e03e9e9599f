"""SAELens's folder format for an SAE: `cfg.json` + `sae_weights.safetensors`, both ways.

    sae_weights.safetensors   W_enc (C, F), b_enc (F,), W_dec (F, C), b_dec (C,)
    cfg.json                  {"architecture": "standard" | "topk", "d_in": C, "d_sae": F,
                               "k": (topk), "apply_b_dec_to_input": true,
                               "normalize_activations": "none", "metadata": {...}}

This is what SAELens 6's `save_inference_model` writes and `SAE.load_from_disk` reads (its
names are the tensors' names, the same layouts as glassformer's: inputs times (in, out)).

Reading folds three SAELens settings into the plain weights, each exactly:
- apply_b_dec_to_input false: (x) W_enc + b_enc = (x - b_dec) W_enc + (b_enc + b_dec W_enc);
- a TopK with rescale_acts_by_decoder_norm: pre * n picks the same top k as SAELens and
  acts / n meets W_dec, so W_enc, b_enc times n and W_dec rows over n (SAELens's _fold_norm_topk);
- folders older than SAELens 6 (no architecture: standard; activation_fn "topk" with its k).
Input normalisation other than "none" and hook_z reshaping are refused in one line.
"""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from glassformer.errors import GlassformerError
from glassformer.interpret.sae.model import SAELENS_ARCHITECTURE, SAEConfig, sae_shapes
from glassformer.io.safetensors import load_safetensors, save_safetensors, write_atomically
from glassformer.json_object import read_json_object

CFG_FILE = "cfg.json"
WEIGHTS_FILE = "sae_weights.safetensors"
# The SAELens release whose folder format this writes (SAELens reads a folder whose metadata has
# no sae_lens_version as one older than 6.0, and then drops the metadata)
SAELENS_FORMAT_VERSION = "6.51.1"
# glassformer's param names -> SAELens's tensor names
TENSOR_NAMES = {"w_enc": "W_enc", "b_enc": "b_enc", "w_dec": "W_dec", "b_dec": "b_dec"}


def saelens_cfg(cfg: SAEConfig, metadata: dict) -> dict:
    """cfg.json's object for an SAE trained here (metadata: model_name, hook_name, ...)."""
    out = {"architecture": SAELENS_ARCHITECTURE[cfg.arch], "d_in": cfg.d_in,
           "d_sae": cfg.d_sae, "dtype": "float32", "device": "cpu",
           "apply_b_dec_to_input": True, "normalize_activations": "none",
           "reshape_activations": "none",
           "metadata": {"sae_lens_version": SAELENS_FORMAT_VERSION, **metadata}}
    if cfg.arch == "topk":
        out.update(k=cfg.k, rescale_acts_by_decoder_norm=False)
    return out


def save_sae(folder: str | Path, params: dict, cfg: SAEConfig, metadata: dict) -> Path:
    """Write the SAE to `folder` (created); the weights first, then cfg.json, each atomically,
    so a folder with a cfg.json is whole."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise GlassformerError(f"{folder} exists and is not a folder")
    folder.mkdir(parents=True, exist_ok=True)
    tensors = {theirs: np.asarray(params[ours], dtype=np.float32)
               for ours, theirs in TENSOR_NAMES.items()}
    save_safetensors(folder / WEIGHTS_FILE, tensors)
    text = json.dumps(saelens_cfg(cfg, metadata), indent=2) + "\n"
    write_atomically(folder / CFG_FILE, lambda f: f.write(text.encode("utf-8")))
    return folder


def _architecture(raw: dict, folder: Path) -> tuple[str, int | None]:
    """(glassformer's arch, k) of a cfg.json, pre-6.0 folders included."""
    name = raw.get("architecture", "standard")
    k = raw.get("k")
    if raw.get("activation_fn") == "topk" or raw.get("activation_fn_str") == "topk":
        name, k = "topk", (raw.get("activation_fn_kwargs") or {}).get("k", k)
    ours = {theirs: mine for mine, theirs in SAELENS_ARCHITECTURE.items()}
    if name not in ours:
        raise GlassformerError(f"{folder}: SAE architecture {name!r} is not supported; "
                               f"expected one of {', '.join(ours)}")
    return ours[name], k


def _check_settings(raw: dict, folder: Path) -> None:
    norm = raw.get("normalize_activations") or "none"
    if norm not in ("none", False):
        raise GlassformerError(f"{folder}: normalize_activations {norm!r} is not supported; "
                               "expected 'none' (fold the scaling into the weights first)")
    if (raw.get("reshape_activations") or "none") != "none":
        raise GlassformerError(f"{folder}: reshape_activations {raw['reshape_activations']!r}"
                               " (hook_z SAEs) is not supported; expected 'none'")


def load_sae(folder: str | Path) -> tuple[dict, SAEConfig, dict]:
    """(params, cfg, metadata) of an SAELens folder, the SAELens settings folded in (above)."""
    folder = Path(folder)
    for name in (CFG_FILE, WEIGHTS_FILE):
        if not (folder / name).is_file():
            raise GlassformerError(f"{folder} is not an SAE folder: it has no {name}")
    raw = read_json_object(folder / CFG_FILE)
    arch, k = _architecture(raw, folder)
    _check_settings(raw, folder)
    tensors = load_safetensors(folder / WEIGHTS_FILE)
    missing = sorted(set(TENSOR_NAMES.values()) - tensors.keys())
    if missing:
        raise GlassformerError(f"{folder / WEIGHTS_FILE} has no tensor {missing[0]!r}")
    params = {ours: tensors[theirs] for ours, theirs in TENSOR_NAMES.items()}
    d_in, d_sae = params["w_enc"].shape if params["w_enc"].ndim == 2 else (0, 0)
    cfg = SAEConfig(d_in=int(raw.get("d_in", d_in)), d_sae=int(raw.get("d_sae", d_sae)),
                    arch=arch, k=k)
    for name, shape in sae_shapes(cfg).items():
        if params[name].shape != shape:
            raise GlassformerError(f"{folder / WEIGHTS_FILE}: {TENSOR_NAMES[name]} has shape "
                                   f"{params[name].shape}, expected {shape} from {CFG_FILE}")
    if raw.get("apply_b_dec_to_input", True) is False:
        params["b_enc"] = params["b_enc"] + params["b_dec"] @ params["w_enc"]   # (C,) @ (C, F)
    if arch == "topk" and raw.get("rescale_acts_by_decoder_norm", False):
        norms = np.maximum(np.linalg.norm(params["w_dec"], axis=-1), 1e-8)      # (F,)
        params["w_enc"] = params["w_enc"] * norms
        params["b_enc"] = params["b_enc"] * norms
        params["w_dec"] = params["w_dec"] / norms[:, None]
    metadata = raw.get("metadata") if isinstance(raw.get("metadata"), dict) else {}
    return params, cfg, metadata
