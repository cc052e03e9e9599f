"""The experts view of a Mixture-of-Experts model's page: what each layer's router chose.

`experts_data(routes, n_experts, pad)` turns each sparse layer's routing of batch row 0 (the
chosen experts and their mixing weights, read from the forward's ctx) into the page's `experts`
key, which static/experts.js draws:

    experts  {n_experts, k, layers: [{layer, experts (T, k) ids, weights (T, k), load (E,)}]}
             or null for a model whose MLPs are all dense

`load` is the layer's share of routed token-slots per expert over the real tokens
(ops/load_balance.py's expert_load, the figure train_log.jsonl records as `expert_load`).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from glassformer.blocks.moe import chosen_experts, chosen_weights
from glassformer.blocks.residual import moe_block_ctx
from glassformer.ops.load_balance import expert_load

DIGITS = 4  # decimals kept for the weights and loads written as JSON


class Route(NamedTuple):
    """One sparse layer's routing of one text: its index, and per token the k chosen experts
    (best first) and the weights their outputs are mixed with."""
    layer: int
    experts: np.ndarray     # (T, k) int expert ids
    weights: np.ndarray     # (T, k) float mixing weights


def routes_of(ctx, n_rows: int) -> list[Route]:
    """Each sparse layer's routing of batch row 0, read off a decoder forward's ctx (its
    blocks' MoE ctx: blocks/moe.py's chosen_experts and chosen_weights, rows (b, t) row-major).

    n_rows: T, the tokens of one batch row."""
    routes = []
    for layer, block in enumerate(ctx.blocks):
        moe = moe_block_ctx(block)
        if moe is None:
            continue                                                        # a dense layer
        routes.append(Route(layer, chosen_experts(moe)[:n_rows], chosen_weights(moe)[:n_rows]))
    return routes


def experts_data(routes: list[Route], n_experts: int, pad: np.ndarray) -> dict | None:
    """The page's `experts` key (module docstring); None when there is no sparse layer.

    pad: (T,) bool, True on padding tokens (routed, but left out of the load).
    """
    if not routes:
        return None
    layers = []
    for route in routes:
        load = expert_load(route.experts[None], n_experts, ~pad)[0]        # (1, T, k) -> (E,)
        layers.append({"layer": route.layer, "experts": route.experts.tolist(),
                       "weights": np.round(route.weights.astype(np.float64), DIGITS).tolist(),
                       "load": np.round(load, DIGITS).tolist()})
    return {"n_experts": n_experts, "k": int(routes[0].experts.shape[-1]), "layers": layers}
