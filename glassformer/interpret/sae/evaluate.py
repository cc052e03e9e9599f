"""How good an SAE is, on held-out windows of text: how much of the activations it explains, how
few features it uses, and how much of the model's next-token loss survives its reconstruction.

    explained variance  1 - mean ||out - x||^2 / mean ||x - mean x||^2      (SAELens's metric)
    L0                  mean number of features firing per position
    dead_on_eval        features that fired at no held-out position
    CE loss recovered   (CE_zero - CE_sae) / (CE_zero - CE_clean)            (SAELens's evals)

CE_clean is the model's mean next-token cross-entropy; CE_sae the same with the hook's value
replaced by the SAE's reconstruction; CE_zero with it replaced by zeros. 1 means the SAE loses
nothing, 0 that it is as bad as erasing the stream. Attention-sink positions (stream.py) keep
their own value in both replacements, as they were left out of training.
"""
from __future__ import annotations

import numpy as np

from glassformer.interpret.sae.activations import activations, logits_with
from glassformer.interpret.sae.model import SAEConfig, decode, encode
from glassformer.interpret.sae.stream import sink_mask
from glassformer.interpret.sae.train import explained_variance
from glassformer.models.model import Model
from glassformer.ops.cross_entropy import cross_entropy_forward


def next_token_loss(logits: np.ndarray, ids: np.ndarray) -> float:
    """Mean cross-entropy of logits (B, T, V) predicting ids[:, 1:] (B, T - 1)."""
    loss, _ = cross_entropy_forward(logits[:, :-1], ids[:, 1:])
    return float(loss)


def evaluate_sae(model: Model, params: dict, cfg: SAEConfig, hook: str, windows_ids: np.ndarray,
                 *, rows_per_forward: int) -> dict:
    """The metrics above over windows (W, T), computed rows_per_forward windows at a time."""
    totals = {"clean": 0.0, "sae": 0.0, "zero": 0.0}
    xs, outs, l0s, fired = [], [], [], np.zeros(cfg.d_sae, dtype=bool)
    for start in range(0, len(windows_ids), rows_per_forward):
        ids = windows_ids[start:start + rows_per_forward]                    # (B, T)
        x = activations(model, ids, hook)                                     # (B, T, C)
        keep = ~sink_mask(x)                                                  # (B, T)
        acts = encode(params, x[keep], cfg)                                   # (n, F)
        out = decode(params, acts)                                            # (n, C)
        xs.append(x[keep])
        outs.append(out)
        l0s.append((acts > 0).sum(axis=-1))
        fired |= (acts > 0).any(axis=0)
        spliced, zeroed = x.copy(), x.copy()
        spliced[keep] = out
        zeroed[keep] = 0.0
        share = len(ids) / len(windows_ids)
        totals["clean"] += share * next_token_loss(model(ids), ids)
        totals["sae"] += share * next_token_loss(logits_with(model, ids, hook, spliced), ids)
        totals["zero"] += share * next_token_loss(logits_with(model, ids, hook, zeroed), ids)
    x_all, out_all = np.concatenate(xs), np.concatenate(outs)
    lost = totals["zero"] - totals["clean"]
    return {"explained_variance": explained_variance(x_all, out_all),
            "l0": float(np.concatenate(l0s).mean()),
            "dead_on_eval": int((~fired).sum()),
            "ce_clean": totals["clean"], "ce_sae": totals["sae"], "ce_zero": totals["zero"],
            "ce_loss_recovered": (totals["zero"] - totals["sae"]) / lost if lost else float("nan"),
            "positions": int(x_all.shape[0])}
