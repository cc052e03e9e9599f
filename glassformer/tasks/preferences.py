"""Preference accuracy: how often a DPO-trained adapter prefers the chosen reply to the rejected
one, measured as TRL measures it during training, on a file of pairs it never trained on.

    data    TRL preference pairs (train/datasets/prefs.py), e.g. tang_prefs_heldout.jsonl
    policy  the base model with the adapter; reference: the base model alone, or with a
            reference adapter (a DPO run started from an SFT adapter with --ref adapter)
    reward  beta * (log pi(completion) - log ref(completion)), summed over the completion's
            tokens (train/objectives/dpo.py's sequence_logps, the ones DPO trains on)

Returns the share of pairs whose chosen reward beats the rejected one (TRL's
rewards/accuracies) and the mean margin (rewards/margins), over every pair of the file (or its
first `limit`).

Cost (issue 49): `batch_size` pairs go through the model in one forward (their chosen and
rejected rows together, as DPO trains), the LM head runs on the completion's positions only
(sequence_logps' head_rows), and no layer's activations outlive the next layer (no backward
follows: sequence_logps(backward=False)). SmolLM2-135M on 100 Tang held-out pairs, loading
included: 126 CPU-seconds and a 1,267 MiB peak (the loaded model's), against 232 s and 5,337 MiB
when every layer's activations were kept (docs/performance.md, issue 49).

    preference_accuracy(model, "RUN", "tang_prefs_heldout.jsonl")   # PreferenceResult(...)
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable, NamedTuple

import numpy as np

from glassformer.errors import GlassformerError
from glassformer.io.peft import load_adapter
from glassformer.models.family import CAUSAL
from glassformer.tokenizers.chat_template import chat_template_of
from glassformer.train.datasets.prefs import encode_pref_file, pair_rows
from glassformer.train.objectives.dpo import DPOSettings, sequence_logps


PAIRS_PER_FORWARD = 4   # the default batch: 8 rows; the head's (N, V) arrays stay ~100 MB each


class PreferenceResult(NamedTuple):
    accuracy: float     # share of pairs with chosen reward > rejected reward
    margin: float       # mean (chosen reward - rejected reward)
    pairs: int
    beta: float


def check_sizes(batch_size: int, limit: int | None) -> None:
    """One line for a batch size or limit below one pair (before a model is loaded for them)."""
    for what, value in (("batch size", batch_size), ("limit", limit)):
        if value is not None and value < 1:
            raise GlassformerError(f"the {what} must be at least 1 pair, got {value}")


def preference_accuracy(model, adapter: str | Path, path: str | Path, *,
                        beta: float = DPOSettings().beta, batch_size: int = PAIRS_PER_FORWARD,
                        ref_adapter: str | Path | None = None, limit: int | None = None,
                        template_budget=None,
                        on_pairs: Callable[[int, int], None] | None = None) -> PreferenceResult:
    """Reward accuracy and mean margin of base + adapter against the base (or base +
    ref_adapter), on a pairs file (its first `limit` pairs when given), `batch_size` pairs a
    forward; template_budget: the chat template's render limits
    (tokenizers/template_budget.RenderBudget); on_pairs(done, total) after each batch."""
    check_sizes(batch_size, limit)
    if model.family.kind != CAUSAL:
        raise GlassformerError(f"preference accuracy needs a causal LM, got {model.arch}")
    adapters, _ = load_adapter(adapter, model)
    policy = {**model.params, **adapters}
    reference = model.params
    if ref_adapter is not None:
        reference = {**model.params, **load_adapter(ref_adapter, model)[0]}
    data = encode_pref_file(path, model.tokenizer, chat_template_of(model.tokenizer,
                                                                    template_budget),
                            block_size=model.cfg.max_seq_len - 1)
    accurate, margins = [], []
    n = data.n if limit is None else min(limit, data.n)
    for start in range(0, n, batch_size):
        rows = pair_rows(data, np.arange(start, min(start + batch_size, n)))        # (2b,)
        width = int(data.rows.lengths[rows].max()) - 1
        x = data.rows.ids[rows, :width].astype(np.int64)                           # (2b, T)
        y = data.rows.targets[rows, :width].astype(np.int64)
        logps = sequence_logps(model.family, policy, model.cfg, x, y, train=False,
                               backward=False).logps                          # (2b,)
        ref = sequence_logps(model.family, reference, model.cfg, x, y, train=False,
                             backward=False).logps
        half = len(rows) // 2
        chosen = beta * (logps[:half] - ref[:half].astype(np.float64))
        rejected = beta * (logps[half:] - ref[half:].astype(np.float64))
        accurate.append(chosen > rejected)
        margins.append(chosen - rejected)
        if on_pairs is not None:
            on_pairs(min(start + batch_size, n), n)
    return PreferenceResult(float(np.concatenate(accurate).mean()),
                            float(np.concatenate(margins).mean()), n, float(beta))
