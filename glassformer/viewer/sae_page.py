"""An SAE's feature pages: for each feature, the contexts of the text where it fires most and
its logit effect (static/interp.js's `sae` section; interp_page.py holds the page).

    feature_acts(model, params, cfg, hook, windows_ids)   (W, T, F) the feature activations
    sae_section(model, params, cfg, hook, windows_ids, ...)  the section's JSON
    sae_folder_section(model, folder, text, hook, ...)       the same for a saved SAE folder

Top contexts. The text is cut into windows (W, T) as `glassformer sae train` cuts it, the model
runs to the hook, the SAE encodes every position (attention sinks left out, as in training:
interpret/sae/stream.py); a feature's top contexts are its largest activations, each shown with
SPAN tokens either side, every token tinted by the feature's activation there.

Logit effect. A feature writes its decoder row W_dec[f] into the stream; read straight out by
the unembedding, through the final norm's weight w_f (its per-token scale left aside), it moves
the logits by

    effect = (W_dec[f] * w_f) @ W_U        (V,)

the direct path, as SAELens's and Neuronpedia's "logit weight distribution" show it (no later
layer in between). The page lists the tokens it raises and lowers most.
"""
from __future__ import annotations

import numpy as np

from glassformer.errors import GlassformerError
from glassformer.interpret.sae.activations import activations, hook_width
from glassformer.interpret.sae.model import encode
from glassformer.interpret.sae.run import text_ids
from glassformer.interpret.sae.saelens_folder import load_sae
from glassformer.interpret.sae.stream import sink_mask, windows
from glassformer.memory import check_memory
from glassformer.ops.quant import as_array
from glassformer.viewer.tokens import describe_tokens

SPAN = 8          # tokens shown either side of a top activation
DIGITS = 4


def feature_acts(model, params: dict, cfg, hook: str, windows_ids: np.ndarray, *,
                 rows_per_forward: int = 4) -> np.ndarray:
    """(W, T, F) float32 feature activations over the windows (W, T); 0 at attention sinks."""
    n_windows, context = windows_ids.shape
    check_memory(n_windows * context * cfg.d_sae * 4,
                 f"the activations of {cfg.d_sae:,} features over {n_windows * context:,} tokens",
                 "lower --tokens")
    out = np.zeros((n_windows, context, cfg.d_sae), np.float32)
    for start in range(0, n_windows, rows_per_forward):
        acts = activations(model, windows_ids[start:start + rows_per_forward], hook)  # (B,T,C)
        feats = encode(params, acts.reshape(-1, acts.shape[-1]).astype(np.float32), cfg)
        feats = feats.reshape(*acts.shape[:2], cfg.d_sae)                          # (B,T,F)
        feats[sink_mask(acts)] = 0.0
        out[start:start + acts.shape[0]] = feats
    return out


def logit_effect(model, w_dec_row: np.ndarray) -> np.ndarray:
    """(V,) the logits one unit of the feature writes directly (module docstring)."""
    w_u = as_array(model.params["lm_head"] if "lm_head" in model.params
                   else model.params["tok_emb"].T)                          # (C, V)
    direction = w_dec_row.astype(np.float64)
    if "norm_f.w" in model.params:
        direction = direction * model.params["norm_f.w"]
    return direction @ w_u                                                  # (C,) @ (C, V)


def chosen_features(acts: np.ndarray, features, count: int) -> list[int]:
    """The features asked for, or the `count` with the largest activations among those that
    fire on at least two positions (one firing is an outlier, not a feature to read)."""
    n_features = acts.shape[-1]
    if features:
        bad = [f for f in features if not 0 <= f < n_features]
        if bad:
            raise GlassformerError(f"feature {bad[0]} is outside the SAE's 0..{n_features - 1}")
        return [int(f) for f in features]
    flat = acts.reshape(-1, n_features)
    fires = (flat > 0).sum(axis=0)
    peak = np.where(fires >= 2, flat.max(axis=0), -1.0)
    order = [int(f) for f in np.argsort(-peak) if peak[f] > 0]
    return order[:count]


def _context(model, window: np.ndarray, feats: np.ndarray, at: int, span: int) -> dict:
    lo, hi = max(0, at - span), min(len(window), at + span + 1)
    tokens = describe_tokens(model.tokenizer, [int(t) for t in window[lo:hi]])
    return {"tokens": [tok.text for tok in tokens],
            "acts": [round(float(v), DIGITS) for v in feats[lo:hi]],
            "at": at - lo, "value": round(float(feats[at]), DIGITS)}


def _tokens_of(model, ids: np.ndarray, values: np.ndarray) -> list[dict]:
    texts = describe_tokens(model.tokenizer, [int(i) for i in ids])
    return [{"id": int(i), "text": tok.text, "value": round(float(v), DIGITS)}
            for i, tok, v in zip(ids, texts, values)]


def sae_section(model, params: dict, cfg, hook: str, windows_ids: np.ndarray, *,
                features=None, count: int = 8, contexts: int = 8, span: int = SPAN,
                top_tokens: int = 10, name: str = "", rows_per_forward: int = 4) -> dict:
    """The `sae` section: per feature its density, largest activation, top contexts and the
    tokens its logit effect raises and lowers most."""
    if model.tokenizer is None:
        raise GlassformerError("the model came without a tokenizer; a feature page shows text")
    acts = feature_acts(model, params, cfg, hook, windows_ids,
                        rows_per_forward=rows_per_forward)                  # (W, T, F)
    flat = acts.reshape(-1, cfg.d_sae)
    shown = []
    for f in chosen_features(acts, features, count):
        column = flat[:, f]
        top = [int(i) for i in np.argsort(-column)[:contexts] if column[i] > 0]
        effect = logit_effect(model, params["w_dec"][f])
        up, down = np.argsort(-effect)[:top_tokens], np.argsort(effect)[:top_tokens]
        shown.append({
            "index": f, "max": round(float(column.max()), DIGITS),
            "density": round(float((column > 0).mean()), 6),
            "contexts": [_context(model, windows_ids[i // acts.shape[1]],
                                  acts[i // acts.shape[1], :, f], i % acts.shape[1], span)
                         for i in top],
            "raises": _tokens_of(model, up, effect[up]),
            "lowers": _tokens_of(model, down, effect[down])})
    l0 = float((flat > 0).sum(axis=1).mean())
    return {"name": name, "hook": hook, "arch": cfg.arch, "d_sae": cfg.d_sae,
            "positions": int(flat.shape[0]), "l0": round(l0, 2), "features": shown}


def sae_folder_section(model, folder, text: str, hook: str | None, *, tokens: int,
                       context: int, skip_tokens: int = 0, features=None, count: int = 8,
                       rows_per_forward: int = 4) -> dict:
    """sae_section for a saved SAE folder (ours or SAELens's) over `tokens` tokens of the text
    from token skip_tokens; the hook defaults to the folder's hook_name."""
    params, cfg, metadata = load_sae(folder)
    hook = hook or metadata.get("hook_name")
    if not hook:
        raise GlassformerError(f"{folder} names no hook_name; pass --hook")
    if cfg.d_in != hook_width(model, hook):
        raise GlassformerError(f"{folder} reads width {cfg.d_in}; {hook} has width "
                               f"{hook_width(model, hook)}")
    ids = text_ids(model, text, skip_tokens + tokens)
    return sae_section(model, params, cfg, hook, windows(ids, context, tokens, offset=skip_tokens),
                       features=features, count=count, name=str(folder),
                       rows_per_forward=rows_per_forward)
