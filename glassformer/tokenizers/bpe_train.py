"""Learning byte-level BPE merges from text: the pair-count merge loop (Sennrich et al. 2016).

    1. pre-tokenize the text and count each distinct word: {"hug": 1, " hug": 2, ...}
    2. start from the 256 single-byte tokens (id = byte value); each word is a list of byte ids
    3. count every adjacent pair of ids over all words, weighted by the word's count
    4. the most frequent pair becomes a new token (next id); replace it in every word
    5. repeat 3-4 until the vocabulary has vocab_size tokens (special tokens included)

Ties (two pairs with the same count) go to the pair whose (left bytes, right bytes) sorts first,
so training is deterministic and a hand-worked example can pin the merges.

Step 3 is not redone from scratch: only words that contain the chosen pair change, so we keep
`pair_counts` and, per pair, the set of words holding it, and update just those words. The next
best pair comes from a heap of (-count, left bytes, right bytes) entries; an entry whose count no
longer matches `pair_counts` is stale (the count changed after it was pushed) and is skipped.
"""
from __future__ import annotations

import heapq
from collections import Counter, defaultdict
from typing import Iterable

from glassformer.errors import GlassformerError
from glassformer.tokenizers.bpe import BPETokenizer
from glassformer.tokenizers.pretokenize import PreTokenizer

Pair = tuple[int, int]


def merge_pair(ids: list[int], pair: Pair, new_id: int) -> list[int]:
    """`ids` with every non-overlapping occurrence of `pair`, left to right, replaced by new_id."""
    merged: list[int] = []
    i = 0
    while i < len(ids):
        if i + 1 < len(ids) and ids[i] == pair[0] and ids[i + 1] == pair[1]:
            merged.append(new_id)
            i += 2
        else:
            merged.append(ids[i])
            i += 1
    return merged


def count_pairs(words: list[list[int]], freqs: list[int]
                ) -> tuple[Counter, dict[Pair, set[int]]]:
    """Weighted count of every adjacent pair, and for each pair the indices of words holding it."""
    pair_counts: Counter = Counter()
    pair_words: dict[Pair, set[int]] = defaultdict(set)
    for index, (ids, freq) in enumerate(zip(words, freqs)):
        for pair in zip(ids, ids[1:]):
            pair_counts[pair] += freq
            pair_words[pair].add(index)
    return pair_counts, pair_words


def train_bpe(text: str, vocab_size: int, *, pattern: str = "gpt2",
              special_tokens: Iterable[str] = ()) -> BPETokenizer:
    """A byte-level BPE with `vocab_size` ids learned from `text` (specials take the last ids).

    Stops early, with a smaller vocabulary, when no adjacent pair is left to merge.
    """
    specials = list(special_tokens)
    if vocab_size < 256 + len(specials):
        raise GlassformerError(f"vocab_size must be at least 256 (one id per byte) plus "
                               f"{len(specials)} special tokens, got {vocab_size}")
    pretokenizer = PreTokenizer.named(pattern)
    word_counts = Counter(pretokenizer.split(text))
    words = [list(word.encode("utf-8")) for word in word_counts]   # byte values = initial ids
    freqs = list(word_counts.values())
    token_bytes = [bytes([byte]) for byte in range(256)]            # id -> bytes
    vocab = {data: token_id for token_id, data in enumerate(token_bytes)}
    merges: list[tuple[bytes, bytes]] = []
    pair_counts, pair_words = count_pairs(words, freqs)
    heap = [(-count, token_bytes[a], token_bytes[b], (a, b)) for (a, b), count in pair_counts.items()]
    heapq.heapify(heap)
    while len(vocab) < vocab_size - len(specials) and heap:
        neg_count, left, right, pair = heapq.heappop(heap)
        if pair_counts.get(pair, 0) != -neg_count:
            continue  # stale entry: this pair's count changed after the entry was pushed
        # note: two different pairs can spell the same bytes ("ab"+"c", "a"+"bc"); they share an id.
        new_id = vocab.setdefault(left + right, len(token_bytes))
        if new_id == len(token_bytes):
            token_bytes.append(left + right)
        merges.append((left, right))
        changed = apply_merge_to_words(words, freqs, pair, new_id, pair_counts, pair_words)
        for changed_pair in changed:
            count = pair_counts.get(changed_pair, 0)
            if count > 0:
                a, b = changed_pair
                heapq.heappush(heap, (-count, token_bytes[a], token_bytes[b], changed_pair))
    special_ids = {token: len(token_bytes) + k for k, token in enumerate(specials)}
    return BPETokenizer(vocab, merges, pretokenizer=pretokenizer, special_tokens=special_ids)


def apply_merge_to_words(words: list[list[int]], freqs: list[int], pair: Pair, new_id: int,
                         pair_counts: Counter, pair_words: dict[Pair, set[int]]) -> set[Pair]:
    """Merge `pair` in every word holding it, updating the counts in place; returns touched pairs."""
    changed: set[Pair] = set()
    for index in pair_words.pop(pair, set()):
        old = words[index]
        new = merge_pair(old, pair, new_id)
        if len(new) == len(old):
            continue  # the index was stale: an earlier merge already removed the pair here
        for old_pair in zip(old, old[1:]):
            pair_counts[old_pair] -= freqs[index]
            changed.add(old_pair)
        for new_pair in zip(new, new[1:]):
            pair_counts[new_pair] += freqs[index]
            pair_words[new_pair].add(index)
            changed.add(new_pair)
        words[index] = new
    for touched in changed:
        if pair_counts[touched] <= 0:
            del pair_counts[touched]  # keeps pair_counts to the pairs that still occur
    return changed
