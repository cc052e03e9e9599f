"""`glassformer.translate(model, inputs, beam=1, ...)`: an encoder-decoder's outputs for sources.

    translate(run, "hello")                  -> "HH AH L OW"          (the run's tokenizer)
    translate(run, ["hello", "world"], beam=4) -> ["HH AH L OW", "W ER L D"]
    translate(marian, [[5, 9, 0]])           -> [[17, 4, 8]]           ids in, ids out

Strings are encoded with the model's tokenizer (a training run's pair tokenizer,
tokenizers/pairs.py) and the outputs decoded with it; id arrays (one (S,) array, a (B, S) array,
or a list of id lists) give lists of ids. An output stops before its </s> and never holds it.

Sources of different lengths are batched together: sorted by length, cut into batches of
DECODE_BATCH, padded, the padding masked (by length, not by id, so an id equal to <pad> in a
source is still read), and the outputs put back in the order given. Decoding itself is
generate/beam.py: greedy for beam=1, beam search otherwise.
"""
from __future__ import annotations

import numpy as np

from glassformer.errors import GlassformerError
from glassformer.generate.beam import (DEFAULT_ALPHA, beam_search, check_decoding,
                                       greedy_search)
from glassformer.models.family import ENCODER_DECODER
from glassformer.tasks.results import Translation

DECODE_BATCH = 256   # sources decoded together (each with its K beams)


def _check_model(model) -> None:
    family = getattr(model, "family", None)           # a Model's; anything else is refused
    if family is None or family.kind != ENCODER_DECODER:
        raise GlassformerError(f"translate needs an encoder-decoder (arch transformer); this "
                               f"model is {getattr(model, 'arch', type(model).__name__)}, "
                               "a decoder-only or encoder model: use generate instead")


def _as_id_lists(model, inputs) -> tuple[list[list[int]], bool, bool]:
    """(source id lists, whether the inputs were text, whether a single input was given)."""
    if isinstance(inputs, str):
        inputs, single, text = [inputs], True, True
    elif isinstance(inputs, (list, tuple)) and inputs and all(isinstance(s, str) for s in inputs):
        single, text = False, True
    else:
        flat = isinstance(inputs, (list, tuple)) and inputs and all(
            isinstance(i, (int, np.integer)) for i in inputs)        # one id list: [5, 9, 0]
        array = np.asarray(inputs) if flat else inputs if isinstance(inputs, np.ndarray) else None
        single = array is not None and array.ndim == 1
        inputs = [array] if single else list(array if array is not None else inputs)
        text = False
    if not inputs:
        raise GlassformerError("translate was given no inputs")
    if text:
        if model.tokenizer is None or not hasattr(model.tokenizer, "encode_target"):
            raise GlassformerError("this model has no pair tokenizer to encode text with; give "
                                   "token ids instead")
        return [model.tokenizer.encode(s) for s in inputs], text, single
    ids = [np.asarray(row).reshape(-1) for row in inputs]
    for row in ids:
        if row.size and row.dtype.kind not in "iu":
            raise GlassformerError(f"source ids must be integers, got {row.dtype}")
    return [row.astype(np.int64).tolist() for row in ids], text, single


def _batch(sources: list[list[int]], pad_id: int) -> tuple[np.ndarray, np.ndarray]:
    """Id lists -> (ids (B, S) padded with pad_id, mask (B, S) True on real tokens)."""
    lengths = np.array([len(s) for s in sources])
    if lengths.min() == 0:
        raise GlassformerError("a source is empty: there is nothing to translate")
    ids = np.full((len(sources), lengths.max()), pad_id, dtype=np.int64)
    for i, source in enumerate(sources):  # note: building a batch, once per batch
        ids[i, :len(source)] = source
    mask = np.arange(lengths.max())[None, :] < lengths[:, None]    # (B, S)
    return ids, mask


def translate_ids(model, sources: list[list[int]], *, beam: int = 1,
                  max_new_tokens: int | None = None, min_new_tokens: int = 0,
                  alpha: float = DEFAULT_ALPHA) -> list[list[int]]:
    """Output ids (without </s>) for each source id list, in the order given."""
    _check_model(model)
    cfg = model.cfg
    max_new = cfg.max_seq_len if max_new_tokens is None else max_new_tokens
    longest = max(len(s) for s in sources)
    check_decoding(cfg, np.zeros((1, max(longest, 1)), np.int64), beam=beam,
                   max_new_tokens=max_new, min_new_tokens=min_new_tokens)
    order = np.argsort([len(s) for s in sources], kind="stable")   # similar lengths together
    outputs: list[list[int]] = [[] for _ in sources]
    for start in range(0, len(sources), DECODE_BATCH):
        chunk = order[start:start + DECODE_BATCH]
        ids, mask = _batch([sources[i] for i in chunk], cfg.pad_id)
        check_decoding(cfg, ids, beam=beam, max_new_tokens=max_new,
                       min_new_tokens=min_new_tokens)
        if beam == 1:
            rows = greedy_search(model.params, cfg, ids, src_mask=mask, max_new_tokens=max_new,
                                 min_new_tokens=min_new_tokens).tolist()
        else:
            rows = beam_search(model.params, cfg, ids, beam=beam, src_mask=mask,
                               max_new_tokens=max_new, min_new_tokens=min_new_tokens,
                               alpha=alpha)
        for i, row in zip(chunk, rows):
            outputs[i] = _until_eos(row, cfg.eos_id)
    return outputs


def _until_eos(row: list[int], eos_id: int) -> list[int]:
    return row[:row.index(eos_id)] if eos_id in row else row


def translate(model, inputs, beam: int = 1, max_new_tokens: int | None = None,
              min_new_tokens: int = 0, alpha: float = DEFAULT_ALPHA):
    """The model's output for each input: strings for strings, id lists for ids (see the
    module docstring). beam: 1 is greedy; alpha: GNMT's length penalty exponent (beam > 1);
    max_new_tokens: default the model's context."""
    _check_model(model)
    sources, text, single = _as_id_lists(model, inputs)
    outputs = translate_ids(model, sources, beam=beam, max_new_tokens=max_new_tokens,
                            min_new_tokens=min_new_tokens, alpha=alpha)
    if text:
        # str values that also draw themselves in Jupyter (tasks/results.py)
        sources = [inputs] if single else inputs
        outputs = [Translation(model.tokenizer.decode(ids), source)
                   for ids, source in zip(outputs, sources)]
    return outputs[0] if single else outputs
