"""Gradcheck cases for the sparse autoencoder: the encoder alone (ReLU and TopK, ops/sae.py), the
loss alone (mse + decoder-norm-weighted L1), and a whole training step (interpret/sae/model.py),
whose gradients reach W_enc, b_enc, W_dec, b_dec and x; and TopK's auxiliary loss on dead
features (ops/sae_aux.py) alone.

The biases are drawn so that no pre-activation sits within a nudge of ReLU's kink or of the k-th
largest one (a central difference across a kink measures neither side)."""
from __future__ import annotations

import numpy as np

from glassformer.gradcheck.core import GradcheckCase
from glassformer.interpret.sae.model import SAEConfig, sae_backward, sae_forward
from glassformer.ops.sae import (sae_encode_backward, sae_encode_forward, sae_loss_backward,
                                 sae_loss_forward)
from glassformer.ops.sae_aux import topk_aux_backward, topk_aux_forward

N, C, F = 5, 4, 7        # rows, d_in, d_sae


def _params(rng):
    return {"x": rng.standard_normal((N, C)), "w_enc": 0.7 * rng.standard_normal((C, F)),
            "b_enc": 0.3 * rng.standard_normal(F), "w_dec": 0.7 * rng.standard_normal((F, C)),
            "b_dec": 0.3 * rng.standard_normal(C)}


def _encode_case(mode, k):
    def forward(inp):
        return sae_encode_forward(inp["x"], inp["w_enc"], inp["b_enc"], inp["b_dec"], k=k)

    def backward(dout, ctx):
        dx, dw_enc, db_enc, db_dec = sae_encode_backward(dout, ctx)
        return {"x": dx, "w_enc": dw_enc, "b_enc": db_enc, "b_dec": db_dec}

    return GradcheckCase("sae_encode", mode, _params, forward, backward)


def _loss_case(mode, l1):
    def make(rng):
        inp = _params(rng)
        inp["out"] = rng.standard_normal((N, C))
        inp["acts"] = np.abs(rng.standard_normal((N, F))) * (rng.random((N, F)) < 0.5)
        return inp

    def forward(inp):
        loss, ctx = sae_loss_forward(inp["x"], inp["out"], inp["acts"], inp["w_dec"], l1=l1)
        return np.array(loss), ctx

    def backward(dout, ctx):
        dx, dout_, dacts, dw_dec = sae_loss_backward(float(dout), ctx)
        grads = {"x": dx, "out": dout_, "w_dec": dw_dec}
        if l1:
            # note: acts = 0 sits on |acts|'s kink; the nonzero ones are checked
            grads["acts"] = dacts
        return grads

    return GradcheckCase("sae_loss", mode, make, forward, backward)


def _aux_case(mode, n_dead):
    """AuxK alone: x and out (its residual) are held constant, as SAELens detaches them, so the
    gradients checked are pre's and W_dec's."""
    def make(rng):
        inp = _params(rng)
        inp["out"] = rng.standard_normal((N, C))
        inp["pre"] = rng.standard_normal((N, F))
        return inp

    def forward(inp):
        dead = np.arange(F) >= F - n_dead
        loss, ctx = topk_aux_forward(inp["x"], inp["out"], inp["pre"], inp["w_dec"], dead,
                                     coefficient=1.0)
        return np.array(loss), ctx

    def backward(dout, ctx):
        dpre, dw_dec = topk_aux_backward(float(dout), ctx)
        return {"pre": dpre, "w_dec": dw_dec}

    return GradcheckCase("sae_aux", mode, make, forward, backward)


def _step_case(mode, cfg):
    def forward(inp):
        params = {name: inp[name] for name in ("w_enc", "b_enc", "w_dec", "b_dec")}
        loss, _, _, ctx = sae_forward(params, inp["x"], cfg)
        return np.array(loss), ctx

    def backward(dout, ctx):
        grads, dx = sae_backward(ctx, float(dout))
        return {**grads, "x": dx}

    return GradcheckCase("sae", mode, _params, forward, backward)


CASES = [
    _encode_case("relu", None),
    _encode_case("topk", 3),
    _loss_case("mse", 0.0),
    _loss_case("mse-l1", 1.5),
    _step_case("relu-l1", SAEConfig(d_in=C, d_sae=F, arch="relu", l1=1.5)),
    _step_case("topk", SAEConfig(d_in=C, d_sae=F, arch="topk", k=3)),
    _aux_case("3-dead", 3),        # k_aux = min(C // 2, 3) = 2, scale 1
    _aux_case("1-dead", 1),        # k_aux = 1, scale 1 / (C // 2)
]
