"""Learning byte-level BPE merges from text: the pair-count merge loop (Sennrich et al. 2016).

    1. pre-tokenize the text and count each distinct word: {"hug": 1, " hug": 2, ...}
    2. start from the 256 single-byte tokens (id = byte value); each word is a list of byte ids
    3. count every adjacent pair of ids over all words, weighted by the word's count
    4. the most frequent pair becomes a new token (next id); replace it in every word
    5. repeat 3-4 until the vocabulary has vocab_size tokens (special tokens included)

Ties (two pairs with the same count) go to the pair whose (left bytes, right bytes) sorts first,
so training is deterministic and a hand-worked example can pin the merges. The result is HF
`tokenizers`' BpeTrainer's loop, on one thread.

Incremental counts: step 3 is done once. The distinct words lie end to end in one flat list of
symbols, linked inside each word (`after[i]`, `before[i]`: the next and previous live symbol,
-1 at a word's ends), and `places[pair]` lists where the pair starts. A merge visits only those
places, left to right; each one replaces the pair by the new id, unlinks the right symbol, and
moves its weight from the two neighbouring pairs it destroyed to the two it made:

    word " hugs" x1:   ' ' h u g s    merge (u, g) -> ug at place 2:
                       ' ' h ug _ s   (h, u) -1  (g, s) -1  (h, ug) +1  (ug, s) +1

so the whole training costs about the number of symbols merged away, not merges x corpus. The
next pair comes from a heap of (-count, left bytes, right bytes) entries: a pair is pushed when
its count grows; an entry whose count is higher than the pair's count now is pushed back with
the lower count, so the top entry, once it matches, is the true most frequent pair.
subtle: places are never removed when a pair disappears from them; a place whose symbols no
longer spell the pair is stale and skipped. A pair whose count drops to 0 loses its list.

Memory budget (the `tokenizer train` command, measured on 9.2 MB of Tang poems in
docs/performance.md): the text itself and its list of pre-tokens while counting (about 100 bytes
per word), then per byte of the distinct words one symbol (8 bytes), two links (4 bytes each)
and one weight (8 bytes), plus 4 bytes per listed place (a few per byte over the run): about
40-60 bytes per byte of distinct words, and nothing that grows with the number of merges but the
vocabulary itself. Positions are 32-bit: the distinct words may hold at most 2**31 - 1 bytes.
"""
from __future__ import annotations

import heapq
from array import array
from collections import Counter, defaultdict
from typing import Callable, Iterable, NamedTuple

import numpy as np

from glassformer.errors import GlassformerError
from glassformer.tokenizers.bpe import BPETokenizer
from glassformer.tokenizers.pretokenize import PreTokenizer

Pair = tuple[int, int]
GONE = -1  # the symbol of a place merged into its left neighbour
MAX_SYMBOLS = 2**31 - 1  # places are 32-bit ints


class Corpus(NamedTuple):
    """The distinct words end to end: one entry per symbol (a byte at first)."""
    symbols: list[int]   # token id at each place, GONE once merged into the left neighbour
    after: array         # next live place in the same word, -1 at the word's end
    before: array        # previous live place in the same word, -1 at the word's start
    weights: list[int]   # how often the word holding this place occurs in the text


def build_corpus(word_counts: Counter) -> tuple[Corpus, dict[Pair, int], dict[Pair, array]]:
    """Lay the distinct words end to end as byte ids, linked within each word; count the pairs.

    Built with NumPy (no Python loop over bytes), then handed to the merge loop as a list and
    arrays, whose items read as plain ints.
    """
    encoded = [word.encode("utf-8") for word in word_counts]
    lengths = np.array([len(data) for data in encoded], dtype=np.int64)     # (W,)
    total = int(lengths.sum())
    if total > MAX_SYMBOLS:
        raise GlassformerError(f"the distinct words hold {total} bytes; training takes at most "
                               f"{MAX_SYMBOLS} (32-bit places)")
    joined = b"".join(encoded)
    del encoded
    symbols = np.frombuffer(joined, dtype=np.uint8)                         # (N,)
    ends = np.cumsum(lengths)                                               # (W,) one past each
    after = np.arange(1, total + 1, dtype=np.int32)                         # (N,)
    after[ends - 1] = -1
    before = np.arange(-1, total - 1, dtype=np.int32)                       # (N,)
    before[ends - lengths] = -1
    weights = np.repeat(np.array(list(word_counts.values()), dtype=np.int64), lengths)  # (N,)
    pair_counts, places = count_pairs(symbols, after, weights)
    corpus = Corpus(list(joined), int32_array(after), int32_array(before), weights.tolist())
    return corpus, pair_counts, places


def int32_array(values: np.ndarray) -> array:
    """A NumPy int32 vector as an array('i'): indexing it gives Python ints, fast and small."""
    result = array("i")
    result.frombytes(values.astype(np.int32).tobytes())
    return result


def count_pairs(symbols: np.ndarray, after: np.ndarray, weights: np.ndarray
                ) -> tuple[dict[Pair, int], dict[Pair, array]]:
    """Weighted count of every adjacent byte pair, and the places where each one starts.

    Done once, vectorised: a pair of bytes (a, b) is the 16-bit code a * 256 + b.
    """
    starts = np.flatnonzero(after >= 0).astype(np.int32)                    # (P,) pair places
    codes = symbols[starts].astype(np.uint16) * 256 + symbols[starts + 1]   # (P,)
    totals = np.bincount(codes, weights=weights[starts], minlength=256 * 256)  # (65536,)
    # stable (a radix sort on 16 bits): each pair's places stay in increasing order
    order = np.argsort(codes, kind="stable")
    sorted_codes = codes[order]
    sorted_places = starts[order]
    del order, starts
    bounds = np.flatnonzero(np.diff(sorted_codes)) + 1
    pair_counts: dict[Pair, int] = {}
    places: dict[Pair, array] = {}
    for first, last in zip(np.r_[0, bounds], np.r_[bounds, len(codes)]):
        if first == last:
            continue  # no pairs at all (every word is one byte long)
        code = int(sorted_codes[first])
        pair = (code // 256, code % 256)
        pair_counts[pair] = int(totals[code])
        places[pair] = int32_array(sorted_places[first:last])
    return pair_counts, places


def merge_everywhere(corpus: Corpus, pair: Pair, new_id: int, pair_counts: dict[Pair, int],
                     places: dict[Pair, array]) -> set[Pair]:
    """Replace `pair` by new_id at each of its places, left to right; returns the pairs that grew.

    Count changes are summed per neighbour id during the pass and applied once at the end:
    `moved_before[x]` is the weight that moves from the pair (x, left id) to (x, new id) (and
    `made_before_at[x]` the new pair's places); `_after` likewise on the right side.
    note: left to right matters for a pair of equal symbols: "a a a" merges as (a a) a.
    """
    left_id, right_id = pair
    symbols, after, before, weights = corpus
    moved_before: dict[int, int] = defaultdict(int)
    moved_after: dict[int, int] = defaultdict(int)
    made_before_at: dict[int, list[int]] = defaultdict(list)
    made_after_at: dict[int, list[int]] = defaultdict(list)
    for place in sorted(places.pop(pair)):
        if symbols[place] != left_id:
            continue  # stale: merged away, or changed by an earlier merge
        right = after[place]
        if right < 0 or symbols[right] != right_id:
            continue  # stale: the right neighbour changed
        weight = weights[place]
        neighbour = before[place]
        if neighbour >= 0:
            x = symbols[neighbour]
            moved_before[x] += weight
            made_before_at[x].append(neighbour)
        beyond = after[right]
        if beyond >= 0:
            y = symbols[beyond]
            moved_after[y] += weight
            made_after_at[y].append(place)
            before[beyond] = place
        symbols[place] = new_id
        symbols[right] = GONE
        after[place] = beyond
    pair_counts.pop(pair, None)
    grown = set()
    for x, weight in moved_before.items():
        grown.add(add_count((x, new_id), weight, made_before_at[x], pair_counts, places))
    for y, weight in moved_after.items():
        grown.add(add_count((new_id, y), weight, made_after_at[y], pair_counts, places))
    # note: after the gains, so that a pair made and lost in the same pass ("a a a a" makes and
    # then loses (aa, a)) nets out to what remains.
    for x, weight in moved_before.items():
        add_count((x, left_id), -weight, [], pair_counts, places)
    for y, weight in moved_after.items():
        add_count((right_id, y), -weight, [], pair_counts, places)
    grown.discard(pair)
    return grown


def add_count(pair: Pair, weight: int, new_places: list[int], pair_counts: dict[Pair, int],
              places: dict[Pair, array]) -> Pair:
    """Add weight (negative: take it) to a pair's count, and list its new places; returns pair.

    A pair whose count reaches 0 no longer occurs: it loses its count and its (stale) places.
    """
    count = pair_counts.get(pair, 0) + weight
    if count > 0:
        pair_counts[pair] = count
        places.setdefault(pair, array("i")).extend(new_places)
    else:
        pair_counts.pop(pair, None)
        places.pop(pair, None)
    return pair


def train_bpe(text: str, vocab_size: int, *, pattern: str = "gpt2",
              special_tokens: Iterable[str] = (),
              on_merge: Callable[[], object] | None = None) -> BPETokenizer:
    """A byte-level BPE with `vocab_size` ids learned from `text` (specials take the last ids).

    Stops early, with a smaller vocabulary, when no adjacent pair is left to merge. `on_merge`
    is called after each merge (a progress bar's update).
    """
    specials = list(special_tokens)
    if vocab_size < 256 + len(specials):
        raise GlassformerError(f"vocab_size must be at least 256 (one id per byte) plus "
                               f"{len(specials)} special tokens, got {vocab_size}")
    if not text:
        raise GlassformerError("the training text is empty: there is nothing to learn merges from")
    pretokenizer = PreTokenizer.named(pattern)
    corpus, pair_counts, places = build_corpus(Counter(pretokenizer.split(text)))
    token_bytes = [bytes([byte]) for byte in range(256)]            # id -> bytes
    vocab = {data: token_id for token_id, data in enumerate(token_bytes)}
    merges: list[tuple[bytes, bytes]] = []
    heap = [(-count, token_bytes[a], token_bytes[b], (a, b))
            for (a, b), count in pair_counts.items()]
    heapq.heapify(heap)
    while len(vocab) < vocab_size - len(specials) and heap:
        neg_count, left, right, pair = heapq.heappop(heap)
        count = pair_counts.get(pair, 0)
        if count != -neg_count:
            if count > 0:  # the count fell since the entry was pushed: push it back, lower
                heapq.heappush(heap, (-count, left, right, pair))
            continue
        # note: two different pairs can spell the same bytes ("ab"+"c", "a"+"bc"); they share an id.
        new_id = vocab.setdefault(left + right, len(token_bytes))
        if new_id == len(token_bytes):
            token_bytes.append(left + right)
        merges.append((left, right))
        for grown in merge_everywhere(corpus, pair, new_id, pair_counts, places):
            if grown in pair_counts:
                a, b = grown
                heapq.heappush(heap, (-pair_counts[grown], token_bytes[a], token_bytes[b], grown))
        if on_merge is not None:
            on_merge()
    special_ids = {token: len(token_bytes) + k for k, token in enumerate(specials)}
    return BPETokenizer(vocab, merges, pretokenizer=pretokenizer, special_tokens=special_ids)
