"""The generate loop: prefill the prompt once, then one token at a time with a KV cache.

    prompt ids (B, T0) --prefill, 1 forward--> cache holds T0 positions --> logits of the last
    then repeat: sample a token, feed only that token (B, 1), the cache grows by one.

Batches of prompts of different lengths are left-padded: `attention_mask` (B, T0) is 0 on the
padding, keys there are masked, and each row's positions count its real tokens only
(position = cumsum(mask) - 1), so each row gets the tokens it would get alone.

Past the context (max_seq_len): a model with learned positions (GPT-2) slides its window as
nanoGPT does: each new token sees only the last max_seq_len tokens, at positions 0..T_max-1.
Those positions shift every step, so no cache can be reused there: each step recomputes the
window (cached and uncached generation still agree token for token). A RoPE model stops with a
clear error unless its config allows longer sequences.

The KV cache is sized by the request, prompt + max_new_tokens (at most the context), never by the
model's declared context: a config may declare 10^9 positions (max_position_embeddings), which
would be a 715 GiB cache for SmolLM2's widths. `new_cache_for` estimates its bytes
(`Model.cache_bytes`) and checks them against the memory budget (glassformer/memory.py) before
allocating.
"""
from __future__ import annotations

from typing import Iterator

import numpy as np

from glassformer.blocks.kv_cache import KVCache
from glassformer.errors import GlassformerError
from glassformer.memory import check_memory
from glassformer.generate.constrain import MaskTable, RowConstraint, advance_rows, mask_rows
from glassformer.generate.penalties import History
from glassformer.generate.sampling import Sampling, check_bias_ids, sample
from glassformer.models.family import ENCODER_DECODER


def _check_prompt(ids, attention_mask, vocab_size: int,
                  cached: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """ids and mask checked; cached: the positions a reused KV cache holds (a shared prefix),
    after which each row's left padding starts."""
    ids = np.asarray(ids)
    if ids.ndim == 1:
        ids = ids[None, :]  # one prompt: (T,) -> (1, T)
    if ids.ndim != 2 or ids.shape[1] == 0 or ids.shape[0] == 0:
        raise GlassformerError(f"expected a non-empty prompt of shape (B, T), got {ids.shape}")
    if ids.dtype.kind not in "iu":
        raise GlassformerError(f"expected integer token ids, got {ids.dtype}")
    bad = (ids < 0) | (ids >= vocab_size)
    if attention_mask is None:
        mask = np.ones(ids.shape, dtype=bool)
    else:
        mask = np.asarray(attention_mask).astype(bool)
        if mask.shape != ids.shape:
            raise GlassformerError(f"attention_mask has shape {mask.shape} but the ids have "
                                   f"shape {ids.shape}; they must match")
        rest = mask[:, cached:]   # after a cached shared prefix: each row's own left padding
        if not mask[:, -1].all() or np.any(np.diff(rest.astype(np.int8), axis=1) < 0):
            raise GlassformerError("attention_mask must be left padding: zeros then ones in "
                                   "each row, ending with a real token")
        bad &= mask  # padding may hold any id; it is never read
    if bad.any():
        row, col = np.argwhere(bad)[0]
        raise GlassformerError(f"token id {int(ids[row, col])} at position ({row}, {col}) is "
                               f"outside the vocabulary of V={vocab_size}")
    return ids.astype(np.int64), mask


def positions_from_mask(mask: np.ndarray) -> np.ndarray:
    """(B, T) bool -> (B, T) int: each real token's index among its row's real tokens."""
    return np.maximum(np.cumsum(mask, axis=1) - 1, 0)


def _logits_last(model, ids, mask, kv_cache=None, new=None) -> np.ndarray:
    """Logits (B, V) of the last position. new = how many trailing tokens to feed (cached)."""
    positions = positions_from_mask(mask)
    if new is not None:
        ids, positions = ids[:, -new:], positions[:, -new:]
    # no padding (one prompt, or prompts of one length): no key is masked, so no mask is passed
    # and attention skips the masking pass in every layer
    key_mask = None if mask.all() else mask
    logits, _ = model.forward(ids, attention_mask=key_mask, positions=positions,
                              kv_cache=kv_cache, last_only=True)  # (B, 1, V): no other row read
    return logits[:, -1]


def _check_reused_cache(kv_cache: KVCache | None, ids: np.ndarray, use_cache: bool) -> None:
    """A cache handed to generate must hold fewer positions than the prompt, for its batch."""
    if kv_cache is None:
        return
    if not use_cache:
        raise GlassformerError("a kv_cache was given with use_cache=False; give one or the other")
    if kv_cache.rows != ids.shape[0]:
        raise GlassformerError(f"kv_cache holds a batch of {kv_cache.rows} but the "
                               f"prompt has {ids.shape[0]} rows")
    if kv_cache.length >= ids.shape[1]:
        raise GlassformerError(f"kv_cache already holds {kv_cache.length} positions, the prompt "
                               f"only {ids.shape[1]}: at least the last prompt token must be fed")


def _sampling(sampling: Sampling | None, temperature: float, top_k: int | None,
              top_p: float | None) -> Sampling:
    """The Sampling generate() was given, or the one its temperature/top_k/top_p make."""
    if sampling is None:
        return Sampling(temperature, top_k, top_p)
    if (temperature, top_k, top_p) != (1.0, None, None):
        raise GlassformerError("give either sampling=Sampling(...) or temperature/top_k/top_p, "
                               "not both")
    return sampling


def check_cache_memory(model, batch: int, positions: int, *, prompt: int,
                       ring: bool = False) -> None:
    """Refuse a KV cache of `batch` rows x `positions` past the memory budget, in one line.
    prompt: the prompt's length, for that line. ring: windowed layers keep their window only."""
    check_memory(model.cache_bytes(batch, positions, ring=ring),
                 f"the KV cache of {batch:,} row(s) x {positions:,} positions (a prompt of "
                 f"{prompt:,} tokens + {positions - prompt:,} new tokens)",
                 "ask for fewer new tokens (--max-new-tokens) or a shorter prompt")


def new_cache_for(model, batch: int, positions: int, *, prompt: int) -> KVCache:
    """A KV cache of `batch` rows x `positions` (at most the model's context), its bytes checked
    against the memory budget first. The loop only appends to it, so a layer with a sliding
    window keeps a ring of its window (blocks/kv_cache.py): memory flat past the window."""
    positions = min(positions, model.context_len)
    check_cache_memory(model, batch, positions, prompt=prompt, ring=True)
    return model.new_cache(batch, positions, ring=True)


def padding_start(model) -> int | None:
    """The first id past the model's tokenizer, when the model's vocab is larger (a --tokenizer
    run pads it up to a multiple of 64): ids from there on decode to nothing and are never
    sampled. None when every id is the tokenizer's (or the model has no tokenizer)."""
    tokenizer = getattr(model, "tokenizer", None)
    size = None if tokenizer is None else tokenizer.vocab_size
    return size if size is not None and size < model.cfg.vocab_size else None


def generate(model, ids, *, max_new_tokens: int, temperature: float = 1.0,
             top_k: int | None = None, top_p: float | None = None, seed: int | None = 0,
             stop: list[int] | None = None, attention_mask=None, use_cache: bool = True,
             pad_id: int | None = None, kv_cache: KVCache | None = None,
             sampling: Sampling | None = None,
             constraint: MaskTable | None = None) -> Iterator[np.ndarray]:
    """Yield the next token ids (B,) one step at a time, up to `max_new_tokens` steps.

    stop: token ids that end a row; a finished row then yields `pad_id` (default: its stop id)
    until every row is finished, which ends the loop. Sampling draws from
    np.random.default_rng(seed), so the same seed gives the same tokens.
    sampling: how every row chooses (generate/sampling.py), in place of temperature, top_k and
    top_p (give one or the other).
    constraint: a grammar's MaskTable (generate/constrain/): every row writes a value it
    accepts, masking its logits before sampling; give its end-of-text ids as `stop`.
    kv_cache: a cache that already holds the keys and values of the first `kv_cache.length`
    prompt tokens (a chat's earlier turns): only the rest of the prompt is prefilled, and the
    cache keeps growing as tokens are generated. Default: a fresh cache. Rows that share a cached
    prefix (one item's shots, tasks/evaluate/generative.py) are left-padded after it:
    mask = prefix ones, then each row's zeros and ones.
    """
    if model.family.kind == ENCODER_DECODER:
        raise GlassformerError("this is an encoder-decoder: it writes an output for a source "
                               "text, so use `glassformer translate` (glassformer.translate)")
    if int(max_new_tokens) != max_new_tokens or max_new_tokens < 0:
        raise GlassformerError(f"max_new_tokens must be an integer >= 0, got {max_new_tokens}")
    sampling = _sampling(sampling, temperature, top_k, top_p)
    cfg = model.cfg
    check_bias_ids(sampling, cfg.vocab_size)
    cached = kv_cache.length if kv_cache is not None else 0
    ids, mask = _check_prompt(ids, attention_mask, cfg.vocab_size, cached)
    context = model.context_len
    slides = model.family.sliding_context
    if not slides and ids.shape[1] + max_new_tokens > context:
        raise GlassformerError(
            f"prompt of {ids.shape[1]} tokens + {max_new_tokens} new tokens is past this "
            f"model's context of max_seq_len={context}, and its rotary positions were not "
            f"trained beyond it: ask for at most {max(context - ids.shape[1], 0)} new tokens")
    _check_reused_cache(kv_cache, ids, use_cache)
    padding = padding_start(model)
    rows = [sampling] * ids.shape[0]                     # one record and one generator
    rngs = [np.random.default_rng(seed)] * ids.shape[0]  # for every row
    stop_ids = np.array(sorted(set(stop or [])), dtype=np.int64)
    finished = np.zeros(ids.shape[0], dtype=bool)
    constraints = [None if constraint is None else RowConstraint.start(constraint)
                   for _ in range(ids.shape[0])]
    last_stop = np.zeros(ids.shape[0], dtype=np.int64)
    # penalties read each row's prompt (padding left out) and reply so far
    seen = [History(row[keep], []) for row, keep in zip(ids, mask)] \
        if sampling.needs_history else None
    cache = kv_cache
    prefilled = False
    for _ in range(int(max_new_tokens)):
        if ids.shape[1] > context:                       # slide the window (learned positions)
            logits = _logits_last(model, ids[:, -context:], mask[:, -context:])
        elif not use_cache:
            logits = _logits_last(model, ids, mask)
        elif not prefilled:                              # prefill: the prompt's uncached rest
            if cache is None:                            # sized by this request only
                cache = new_cache_for(model, ids.shape[0], ids.shape[1] + int(max_new_tokens),
                                      prompt=ids.shape[1])
            new = ids.shape[1] - cache.length
            logits = _logits_last(model, ids, mask, kv_cache=cache, new=new)
            cache.advance(new)
            prefilled = True
        else:                                            # decode: only the newest token
            logits = _logits_last(model, ids, mask, kv_cache=cache, new=1)
            cache.advance(1)
        if padding is not None:
            logits = logits.copy()
            logits[:, padding:] = -np.inf                # padding ids: never sampled
        logits = mask_rows(logits, constraints)              # a grammar's refusals: -inf
        next_ids = sample(logits, rows, rngs, history=seen)
        advance_rows([None if done else c for c, done in zip(constraints, finished)], next_ids)
        fill = last_stop if pad_id is None else np.full_like(last_stop, pad_id)
        next_ids = np.where(finished, fill, next_ids)
        yield next_ids
        just_stopped = np.isin(next_ids, stop_ids) & ~finished
        last_stop = np.where(just_stopped, next_ids, last_stop)
        finished |= just_stopped
        if finished.all():
            return
        for row, token in zip(seen or [], next_ids.tolist()):
            row.output.append(token)
        ids = np.concatenate([ids, next_ids[:, None]], axis=1)          # (B, T) -> (B, T+1)
        mask = np.concatenate([mask, np.ones((ids.shape[0], 1), dtype=bool)], axis=1)
