"""Gradcheck cases for the whole encoder-decoder (models/seq2seq.py), one per arrangement:

    paper   post-norm, fixed [sin | cos] positions, sqrt(C)-scaled embeddings, ReLU, one
            embedding shared by source, target and output head; source padding in row 1
    bart    pre-norm with final norms, learned positions at offset 2, LayerNorm on the
            embeddings, GELU, separate source embedding, untied head, logits bias
    paper-dropout  the paper's arrangement training with dropout (p=0.25) on the embeddings
            and every sub-block output, the masks fixed by reseeding (as gradcheck/cases/
            residual_block.py does)

Every param is an input under its model name ("tok_emb", "enc.blocks.0.attn.wq",
"dec.blocks.0.cross.wk", ...), so the cross-attention fan-out into the encoder and the
three-way tok_emb fan-out are both checked. The key biases ("...bk") are left out: their
gradient is exactly zero (gradcheck/cases/_block_params.py says why).
Sizes: V=7, C=4, H=2 (D=2), F=8, one encoder and one decoder layer, B=2, S=4, T=3.
"""
from __future__ import annotations

import numpy as np

from glassformer.gradcheck.cases._block_params import WEIGHT_STD, drop_key_bias, exercised
from glassformer.gradcheck.core import GradcheckCase
from glassformer.models.seq2seq import Seq2SeqConfig, backward, forward, init_params

B, S, T = 2, 4, 3
# The dropout case reseeds its mask generator on every forward, so the + and - nudges of central
# differences see the same masks, as one training step does.
_DROPOUT_SEED = 1234
_TINY = dict(vocab_size=7, max_seq_len=5, n_layer=1, n_head=2, d_model=4, d_ff=8, pad_id=0)


def case(mode: str, cfg: Seq2SeqConfig) -> GradcheckCase:
    def make(rng):
        params = init_params(cfg, rng)
        # O(1) weights, so every nonlinearity is exercised (see _block_params.py)
        params = {name: rng.standard_normal(value.shape) * WEIGHT_STD if value.ndim == 2
                  else value for name, value in params.items()}
        src = rng.integers(1, cfg.vocab_size, (B, S))                    # (B, S), no padding...
        src[1, 2:] = cfg.pad_id                                          # ...but in row 1
        tgt = rng.integers(0, cfg.vocab_size, (B, T))                    # (B, T)
        return {"src_ids": src, "tgt_ids": tgt, **exercised(params, rng)}

    def run_forward(inp):
        params = {name: value for name, value in inp.items() if not name.endswith("_ids")}
        train = cfg.dropout > 0.0
        rng = np.random.default_rng(_DROPOUT_SEED) if train else None
        return forward(params, (inp["src_ids"], inp["tgt_ids"]), cfg, train=train, rng=rng)

    def run_backward(dout, ctx):
        return drop_key_bias(backward(dout, ctx), keep=False)

    return GradcheckCase("seq2seq", mode, make, run_forward, run_backward)


CASES = [
    case("paper", Seq2SeqConfig(**_TINY)),
    case("bart", Seq2SeqConfig(**_TINY, norm_position="pre", positions="learned", pos_offset=2,
                               emb_norm=True, activation="gelu", scale_embedding=False,
                               share_embeddings=False, tie_embeddings=False,
                               logits_bias=True)),
    case("paper-dropout", Seq2SeqConfig(**_TINY, dropout=0.25)),
]
