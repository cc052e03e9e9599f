"""Batch-invariant decoding (`serve --batch-invariant`): a row's numbers are bit for bit the
same alone or beside any other rows, so a seeded sampled reply is too.

A row's logits used to depend on who shared its batch (by ~1e-6), through:

    products      xn @ W with (rows, C) inputs: BLAS picks gemv for one row and gemm for
                  several, and its blocking and thread split follow the row count, so a row's
                  dot products are summed in another order when the batch changes size
    attention     one masked batch over the shared timeline (rows.py): masked keys add zeros,
                  but where a row's keys sit among the columns (set by the other rows' lengths)
                  moved them between SIMD lanes, pairwise-sum blocks and BLAS blocks
    prefill       joiners prefilled together, left-padded to the longest prompt (prefill.py),
                  and a prompt's prefix reused from whatever a free row held (other chunking)

and norms, activations, the LM head's norm and the sampler are already row by row. With the
flag the engine removes each:

    products      every decode step runs all --max-batch rows (idle ones too): each product
                  has one shape, so BLAS takes one path and one order for it, and a row's dot
                  products never depend on the other rows' values (what vLLM's and SGLang's
                  deterministic modes get from fixed-tile kernels; here, a fixed tile of BLAS)
    attention     the decode kernels attend each row over its own keys in key order
                  (kernels/decode_numba.py's `_softmax_in_order`, decode_numpy.py's gathered
                  keys), on the numba path and on the NumPy one (models/common.py sends a
                  flagged cache's decode step to the twins when numba is off)
    prefill       joiners together (prefill.py's Aligned), each prompt from column 0 in the
                  chunks it gets alone, its ids packed with the others' into products and row
                  kernels on fixed 32-row tiles, attending alone over its own keys
                  (blocks/prefill_rows.py); a prefix is reused only in whole chunks of a
                  prompt the row held, computed by the same chunks at the same positions

It is a flag, off by default (as vLLM's VLLM_BATCH_INVARIANT): with few rows running every step
still computes --max-batch rows, a prefill's products are padded to whole tiles, and a held
prefix is reused in whole chunks only (docs/performance.md measures the cost at 8 clients). Invariance holds within one server: another --max-batch, BLAS, thread
count or machine sums in another order.
"""
from __future__ import annotations

import numpy as np

from glassformer.blocks.decode_step import decode_step_applies
from glassformer.blocks.lora import has_adapters
from glassformer.errors import GlassformerError


def check_invariant(model) -> None:
    """Raise unless the model's decoded step runs on the row-by-row kernels
    (blocks/decode_step.py's `decode_step_applies`): other layers attend one masked batch."""
    cfg = model.cfg.block_config()
    dtype = getattr(model.params.get("tok_emb"), "dtype", np.float32)
    x = np.zeros((1, 1, cfg.d_model), dtype=dtype)               # one decoded position
    rope = (x, x) if cfg.position == "rope" else None
    if not decode_step_applies(cfg, x, kv_cache=object(), frozen=has_adapters(model.params),
                               rope_tables=rope):
        raise GlassformerError(
            f"--batch-invariant needs a float32 model of plain pre-norm layers (RMSNorm or "
            f"LayerNorm, RoPE or none, SwiGLU or GELU, no MoE, MLA, QK-norm, sliding window, "
            f"adapters); {model.arch} has other layers: serve it without --batch-invariant")
