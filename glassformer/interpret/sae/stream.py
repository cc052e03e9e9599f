"""The rows an SAE trains on: a text cut into windows, run through the model window-batch by
window-batch, the hook's activations gathered into one (N, C) buffer.

Attention sinks are left out. Some positions (the first of every window, and a few tokens a
model treats alike) carry a residual stream ~100x longer than the rest: SmolLM2-135M's layer 15
has norms ~23,000 there against a median ~170. One such row outweighs a whole batch in the
squared error, and reconstructing it says nothing about features, so rows longer than
SINK_RATIO times the window batch's median norm are dropped here, and are left as they are when
an SAE's reconstruction is spliced back (evaluate.py). How many were dropped is reported.
"""
from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np

from glassformer.errors import GlassformerError
from glassformer.interpret.sae.activations import activations
from glassformer.memory import check_memory
from glassformer.models.model import Model

# A row whose norm exceeds this many times the median row's is an attention sink
SINK_RATIO = 10.0
# float32 working arrays of one forward, per token, in units of d_model (q, k, v, attention
# output, norms, residuals, ~3 MLP widths of ~3 C each): a generous estimate for the budget
FORWARD_WIDTHS = 24


class Gathered(NamedTuple):
    rows: np.ndarray        # (N, C) float32: the hook's activations at the kept positions
    tokens: int             # positions run through the model
    sinks: int              # positions dropped as attention sinks


def sink_mask(acts: np.ndarray) -> np.ndarray:
    """(..., C) -> (...) bool: the rows longer than SINK_RATIO times the median row."""
    norms = np.linalg.norm(acts, axis=-1)                                  # (..., C) -> (...)
    return norms > SINK_RATIO * np.median(norms)


def windows(ids: np.ndarray, context: int, tokens: int, *, offset: int = 0) -> np.ndarray:
    """(W, context) windows of the token stream, from `offset`, W = tokens // context."""
    count = tokens // context
    if count < 1:
        raise GlassformerError(f"need at least one window of {context} tokens, got {tokens}")
    if offset + count * context > len(ids):
        raise GlassformerError(f"the text has {len(ids):,} tokens; {count * context:,} from "
                               f"token {offset:,} were asked for (lower --tokens or --context)")
    return ids[offset:offset + count * context].reshape(count, context)   # (W, T)


def gather_bytes(model: Model, n_windows: int, context: int, rows_per_forward: int) -> int:
    """Bytes gather() holds at once: the buffer, one forward's activations, its attention."""
    width, heads = model.cfg.d_model, model.cfg.n_head
    buffer = n_windows * context * width * 4
    forward = rows_per_forward * context * (FORWARD_WIDTHS * width + heads * context) * 4
    return buffer + forward


def gather(model: Model, windows_ids: np.ndarray, hook: str, *, rows_per_forward: int,
           progress: Callable[[int, int], None] | None = None) -> Gathered:
    """The hook's activations over every window (W, T), sinks dropped, as (N, C) float32;
    the memory is checked first (memory.py's budget)."""
    n_windows, context = windows_ids.shape
    check_memory(gather_bytes(model, n_windows, context, rows_per_forward),
                 f"the activations of {n_windows * context:,} tokens at {hook}",
                 "lower --tokens")
    kept, sinks = [], 0
    for start in range(0, n_windows, rows_per_forward):
        acts = activations(model, windows_ids[start:start + rows_per_forward], hook)  # (B,T,C)
        sink = sink_mask(acts)                                                    # (B, T)
        sinks += int(sink.sum())
        kept.append(acts[~sink].astype(np.float32))                # (B, T, C) -> (n, C)
        end = min(start + rows_per_forward, n_windows)
        if progress is not None and (end * 10) // n_windows != (start * 10) // n_windows:
            progress(end, n_windows)                     # about every tenth of the windows
    return Gathered(np.concatenate(kept), n_windows * context, sinks)
