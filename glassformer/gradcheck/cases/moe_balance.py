"""Gradcheck cases for the Mixture-of-Experts balance losses: the auxiliary load-balancing loss
(`moe_aux_loss`, pooled over layers as transformers computes it, and per layer as the Switch
Transformer paper does) and the router z-loss (`moe_z_loss`), with and without padding rows. The chosen experts are the top-k of each row's logits, as a router picks them."""
from __future__ import annotations

import numpy as np

from glassformer.gradcheck.core import GradcheckCase
from glassformer.ops.load_balance import load_balance_backward, load_balance_forward
from glassformer.ops.router_z_loss import router_z_loss_backward, router_z_loss_forward


def top_k_experts(logits: np.ndarray, top_k: int) -> np.ndarray:
    """(L, N, E) -> (L, N, k): each row's k largest logits' experts, largest first."""
    return np.argsort(-logits, axis=-1, kind="stable")[..., :top_k]


def routing_inputs(rng, shape, top_k, padded_rows=()):
    """Router logits (L, N, E), their top-k experts and a mask with `padded_rows` False."""
    logits = 1.5 * rng.standard_normal(shape)
    mask = np.ones(shape[1], dtype=bool)
    mask[list(padded_rows)] = False
    return {"logits": logits, "chosen": top_k_experts(logits, top_k), "mask": mask}


def _aux_case(mode, shape, top_k, padded_rows=(), per_layer=False):
    def make(rng):
        return routing_inputs(rng, shape, top_k, padded_rows)

    def forward(inp):
        return load_balance_forward(inp["logits"], inp["chosen"], mask=inp["mask"],
                                    per_layer=per_layer)

    def backward(dout, ctx):
        return {"logits": load_balance_backward(dout, ctx)}

    return GradcheckCase("moe_aux_loss", mode, make, forward, backward)


def _z_case(mode, shape, padded_rows=()):
    def make(rng):
        return routing_inputs(rng, shape, 1, padded_rows)

    def forward(inp):
        return router_z_loss_forward(inp["logits"], mask=inp["mask"])

    def backward(dout, ctx):
        return {"logits": router_z_loss_backward(dout, ctx)}

    return GradcheckCase("moe_z_loss", mode, make, forward, backward)


CASES = [
    _aux_case("top-2", (3, 6, 5), 2),                          # (L, N, E), k = 2
    _aux_case("top-1-padding", (2, 7, 4), 1, padded_rows=(2, 5)),
    _aux_case("per-layer-padding", (3, 7, 5), 2, padded_rows=(1, 4), per_layer=True),
    _z_case("plain", (3, 6, 5)),
    _z_case("padding", (2, 7, 4), padded_rows=(0, 6)),
]
