"""Model: a config and its params, with the call users expect (`model(ids)`).

It holds no other state: caches, positions and RNGs are created per call and passed explicitly.
The math lives in the family module (gpt2, llama, bert); this class only routes to it through
the family's `Family` record. Generating and exporting are functions of the layers above:
`glassformer.generate.generate.generate(model, ids, ...)` and
`glassformer.save_pretrained(model, dir)`.
"""
from __future__ import annotations

import numpy as np

from glassformer.blocks.kv_cache import KVCache, KVLayout
from glassformer.errors import GlassformerError
from glassformer.models.family import ENCODER, ENCODER_DECODER
from glassformer.models.registry import arch_of, family


class Model:
    """A model ready to run: `Model(cfg, params)`; `params` uses glassformer's names."""

    def __init__(self, cfg, params: dict, tokenizer=None):
        self.arch = arch_of(cfg)
        self.family = family(self.arch)
        self.cfg = cfg
        self.params = dict(params)
        tok_emb = params.get("tok_emb")
        if (isinstance(tok_emb, np.ndarray) and "lm_head" not in params   # not a QuantizedMatrix
                and self.family.kind != ENCODER):
            # note: a tied LM head computes x @ tok_emb.T at every generated token, a third of the
            # bytes a small model reads per token. Column-major, tok_emb.T is a row-major (C, V)
            # matrix, which the matrix-vector product streams faster (figures: docs/performance.md).
            # Same values and shape.
            self.params["tok_emb"] = np.asfortranarray(params["tok_emb"])
        self.tokenizer = tokenizer          # optional: the tokenizer that came with the weights

    def __repr__(self) -> str:
        return f"Model({self.arch}, {self.num_params():,} params)"

    def num_params(self) -> int:
        return int(sum(p.size for p in self.params.values()))

    def __call__(self, ids: np.ndarray, attention_mask: np.ndarray | None = None, *,
                 decoder_input_ids: np.ndarray | None = None) -> np.ndarray:
        """Logits (B, T, V) for causal LMs and BERTs with a masked-LM head; the last hidden state
        (B, T, C) for encoders without one (BertModel, MiniLM).

        An encoder-decoder ("transformer": Marian, BART) reads source ids (B, S) and
        decoder_input_ids (B, T_dec) and returns (B, T_dec, V) logits, as transformers'
        seq2seq models do; attention_mask (B, S) marks real source tokens (default: not pad).
        """
        if self.family.kind == ENCODER_DECODER:
            if decoder_input_ids is None:
                raise GlassformerError("an encoder-decoder needs decoder_input_ids: "
                                       "model(input_ids, decoder_input_ids=...)")
            pair = (np.asarray(ids), np.asarray(decoder_input_ids))
            return self.family.forward(self.params, pair, self.cfg, src_mask=attention_mask)[0]
        if decoder_input_ids is not None:
            raise GlassformerError(f"decoder_input_ids is for encoder-decoders; {self.arch} "
                                   "reads one sequence")
        return self.forward(np.asarray(ids), attention_mask=attention_mask)[0]

    def forward(self, ids: np.ndarray, *, attention_mask: np.ndarray | None = None,
                positions: np.ndarray | None = None, kv_cache: KVCache | None = None,
                token_type_ids: np.ndarray | None = None, last_only: bool = False,
                on_layer=None, hooks: dict | None = None):
        """(out, ctx) from the family's forward, in eval mode (last_only: a causal LM's logits
        of the last position only, (B, 1, V); on_layer: a causal LM's per-layer reader,
        models/common.py's layers_forward; hooks: {hook name: [fn]} that may replace values
        mid-forward, blocks/hooks.py)."""
        kwargs = {}
        if hooks is not None:
            kwargs["hooks"] = hooks
        if on_layer is not None:
            kwargs["on_layer"] = on_layer
        if last_only:
            kwargs["last_only"] = True
        if attention_mask is not None:
            kwargs["key_mask"] = np.asarray(attention_mask).astype(bool)
        if token_type_ids is not None:
            kwargs["token_type_ids"] = token_type_ids
        if positions is not None:
            kwargs["positions"] = positions
        if kv_cache is not None:
            kwargs["kv_cache"] = kv_cache
        return self.family.forward(self.params, ids, self.cfg, **kwargs)

    @property
    def context_len(self) -> int:
        return self.cfg.max_seq_len

    def kv_layout(self) -> KVLayout:
        """The widths of this model's KV cache (blocks/kv_cache.py); an encoder or an
        encoder-decoder has none here (GlassformerError)."""
        if self.family.kind == ENCODER_DECODER:
            raise GlassformerError("an encoder-decoder decodes with glassformer.translate (its "
                                   "cache: models/seq2seq_decode.py decode_start), not generate")
        if self.family.kv_layout is None:
            raise GlassformerError(f"{self.arch} is an encoder: it reads the whole sequence at "
                                   "once, keeps no KV cache and cannot generate")
        return self.family.kv_layout(self.cfg)

    def layer_windows(self) -> tuple[int | None, ...]:
        """Each layer's sliding attention window (None: full attention); () when no layer
        slides."""
        if self.family.windows is None:
            return ()
        windows = tuple(self.family.windows(self.cfg))
        return windows if any(w is not None for w in windows) else ()

    def new_cache(self, batch: int, max_len: int | None = None, *, ring: bool = False
                  ) -> KVCache:
        """An empty KV cache for this model (default length: its whole context), in the
        weights' dtype. ring: a windowed layer keeps only its window (blocks/kv_cache.py), for a
        decoding loop that only appends (generate); a cache that is cut back or copied column by
        column (chat, serve) keeps every position."""
        return KVCache.allocate(self.kv_layout(), n_layer=self.cfg.n_layer, batch=batch,
                                max_len=max_len or self.context_len,
                                dtype=self.params["tok_emb"].dtype,
                                windows=self.layer_windows() if ring else ())

    def cache_bytes(self, batch: int, max_len: int | None = None, *, ring: bool = False) -> int:
        """Bytes `new_cache(batch, max_len, ring=ring)` would take, asked before allocating (a
        budget)."""
        return KVCache.bytes_for(self.kv_layout(), layers=self.cfg.n_layer, rows=batch,
                                 context=max_len or self.context_len,
                                 dtype=self.params["tok_emb"].dtype,
                                 windows=self.layer_windows() if ring else ())
