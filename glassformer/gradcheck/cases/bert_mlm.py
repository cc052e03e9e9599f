"""Gradcheck cases for BERT with its masked-LM head (models/bert.py forward/backward):

    head      the head alone (mlm_forward/mlm_backward): dense -> GELU -> LayerNorm ->
              x @ tok_emb^T + bias, on hidden states (B, T, C); tok_emb is an input, so the
              decoder's share of its gradient is checked
    model     the whole model with right padding in row 1 and two segments: the encoder, the
              head, and tok_emb's fan-out (input lookup + tied decoder) summed on one line
    tanh      the model with tanh GELU (checkpoints using gelu_new)

Every param is an input under its model name; the key biases ("...bk") are left out: their
gradient is exactly zero (gradcheck/cases/_block_params.py says why).
Sizes: V=7, C=4, H=2 (D=2), F=8, one layer, B=2, T=4.
"""
from __future__ import annotations

from glassformer.gradcheck.cases._block_params import WEIGHT_STD, drop_key_bias, exercised
from glassformer.gradcheck.core import GradcheckCase
from glassformer.models.bert import (BertConfig, backward, forward, init_params, mlm_backward,
                                     mlm_forward)

B, T = 2, 4
_TINY = dict(vocab_size=7, max_seq_len=5, n_layer=1, n_head=2, d_model=4, d_ff=8,
             mlm_head=True)
_IDS = ("ids", "types", "key_mask")


def _params(cfg, rng):
    params = init_params(cfg, rng)
    # O(1) weights, so every nonlinearity is exercised (see _block_params.py)
    params = {name: rng.standard_normal(value.shape) * WEIGHT_STD if value.ndim == 2
              else value for name, value in params.items()}
    return exercised(params, rng)


def head_case() -> GradcheckCase:
    cfg = BertConfig(**_TINY)
    names = ("mlm.w", "mlm.b", "mlm.norm.w", "mlm.norm.b", "mlm.bias", "tok_emb")

    def make(rng):
        params = _params(cfg, rng)
        return {"hidden": rng.standard_normal((B, T, cfg.d_model)),
                **{name: params[name] for name in names}}

    def run_forward(inp):
        return mlm_forward(inp, inp["hidden"], cfg)

    def run_backward(dout, ctx):
        grads, dhidden = mlm_backward(dout, ctx)
        return {"hidden": dhidden, **grads}

    return GradcheckCase("bert_mlm", "head", make, run_forward, run_backward)


def model_case(mode: str, cfg: BertConfig) -> GradcheckCase:
    def make(rng):
        ids = rng.integers(0, cfg.vocab_size, (B, T))                  # (B, T)
        key_mask = [[1, 1, 1, 1], [1, 1, 0, 0]]                        # right padding in row 1
        types = [[0, 0, 1, 1], [0, 1, 1, 1]]
        return {"ids": ids, "types": types, "key_mask": key_mask, **_params(cfg, rng)}

    def run_forward(inp):
        params = {name: value for name, value in inp.items() if name not in _IDS}
        return forward(params, inp["ids"], cfg, token_type_ids=inp["types"],
                       key_mask=inp["key_mask"])

    def run_backward(dout, ctx):
        return drop_key_bias(backward(dout, ctx), keep=False)

    return GradcheckCase("bert_mlm", mode, make, run_forward, run_backward)


CASES = [
    head_case(),
    model_case("model", BertConfig(**_TINY)),
    model_case("tanh", BertConfig(**_TINY, activation="gelu_tanh")),
]
