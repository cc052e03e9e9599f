"""Inverted dropout (Srivastava et al. 2014), as torch's `nn.functional.dropout` does it.

In training each element is kept with probability 1 - p and the kept ones are scaled up:

    keep ~ Bernoulli(1 - p), drawn independently per element
    y    = x * keep / (1 - p)                  x (...) -> y (...)

Scaling at training time ("inverted") keeps E[y] = x, so inference is the identity and needs no
rescaling. With train=False or p == 0 the op is the identity and draws no random numbers, so the
caller's generator is not advanced (ctx records that the mask was skipped).

The mask comes from the caller's `np.random.Generator` (no global random state), so a run is
reproducible from its seed. It will not match torch's random stream element for element; the
tests check the structure instead (fraction kept, scaling, the same mask in backward).

Backward is the same mask and scale applied to the upstream gradient:

    dx = dy * keep / (1 - p)

Derivation: docs/derivations/dropout.md.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from glassformer.errors import GlassformerError
from glassformer.ops._check import check_float
from glassformer.ops._scalars import check_fraction


class DropoutCtx(NamedTuple):
    """Saved for backward.

    keep:  boolean mask shaped like x, True where the element survived; None when the forward was
           the identity (eval mode or p == 0). A bool mask is 1 byte per element, and multiplying
           by it keeps the gradient's dtype.
    scale: 1 / (1 - p) as a Python float (1.0 for the identity), so float32 stays float32.
    """
    keep: np.ndarray | None
    scale: float


def dropout_forward(x: np.ndarray, *, p: float, rng: np.random.Generator | None,
                    train: bool) -> tuple[np.ndarray, DropoutCtx]:
    """Zero each element with probability p and scale survivors by 1/(1-p); identity if not train.

    x (...) -> y (...). In the identity case y is x itself (not a copy), as in torch.

    >>> x = np.ones(6)
    >>> y, ctx = dropout_forward(x, p=0.5, rng=np.random.default_rng(0), train=True)
    >>> bool(np.all(y == 2.0 * ctx.keep))
    True
    >>> dropout_forward(x, p=0.5, rng=None, train=False)[0] is x
    True
    """
    check_float("x", x)
    p = check_fraction("dropout p", p, allow_one=False)
    if not isinstance(train, bool):
        raise GlassformerError(f"expected train to be True or False, got {train!r}")
    if not train or p == 0.0:
        return x, DropoutCtx(keep=None, scale=1.0)
    if not isinstance(rng, np.random.Generator):
        raise GlassformerError(
            f"dropout with train=True and p={p} needs rng, an np.random.Generator; "
            f"got {type(rng).__name__}")
    keep = rng.random(x.shape) >= p     # (...) bool: True with probability 1 - p
    scale = 1.0 / (1.0 - p)
    y = np.where(keep, x * scale, 0.0)  # (...), same dtype as x
    return y, DropoutCtx(keep=keep, scale=scale)


def dropout_backward(dy: np.ndarray, ctx: DropoutCtx) -> np.ndarray:
    """Returns dx: dy through the forward's own mask and scale (a fresh array, also for identity)."""
    if ctx.keep is None:
        return dy.copy()
    return np.where(ctx.keep, dy * ctx.scale, 0.0)
