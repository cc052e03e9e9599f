"""Long pre-tokens (a pasted hash or base64 blob is one word to the regex): the bucket merge loop.

apply_merges is O(n log n) in the length of a word (rank buckets over a linked list); these check it
gives the ids of the old rescanning loop and of both references on words long enough that a
quadratic loop would not finish (200k characters), and on every edge buckets could get wrong:
ties between equal ranks (runs of one letter), stale entries, words of 0, 1 and 2 parts, and a
merge list that gives one token two merges (a new pair can then rank before the bucket merging).
"""
import random
import string

import pytest

from glassformer.tokenizers.bpe import NO_MERGE, apply_merges

LONG = 200_000  # characters in one pre-token: minutes for the quadratic loop, seconds now
TIKTOKEN_LONG = 20_000  # tiktoken rescans too, so it gets a shorter word


def rescanning_merges(ids, merge_table):
    """The quadratic reference: find the leftmost lowest-rank pair by scanning, merge, repeat."""
    parts = list(ids)
    while len(parts) > 1:
        entries = [merge_table.get(pair, NO_MERGE) for pair in zip(parts, parts[1:])]
        best = min(entries)
        if best is NO_MERGE:
            break
        i = entries.index(best)
        parts[i:i + 2] = [best[1]]
    return parts


def letters(n: int, seed: int, alphabet: str = string.ascii_letters) -> str:
    rng = random.Random(seed)
    return "".join(rng.choice(alphabet) for _ in range(n))


def test_hand_worked_ties_and_edges():
    # ids 0..3 are a, b, c, d; rank 0: a+a -> 10, rank 1: 10+10 -> 11, rank 2: b+c -> 12,
    # rank 3: 10+b -> 13. Equal ranks merge leftmost first: a a a -> (a a) a, not a (a a).
    table = {(0, 0): (0, 10), (10, 10): (1, 11), (1, 2): (2, 12), (10, 1): (3, 13)}
    assert apply_merges([], table) == []
    assert apply_merges([0], table) == [0]
    assert apply_merges([0, 0], table) == [10]
    assert apply_merges([0, 0, 0], table) == [10, 0]
    assert apply_merges([0, 0, 0, 0, 0], table) == [11, 0]
    assert apply_merges([0, 0, 1, 2], table) == [10, 12]   # b+c (rank 2) before aa+b (rank 3)
    assert apply_merges([0, 0, 1, 3], table) == [13, 3]


def test_a_token_with_two_merges_keeps_the_lowest_rank_first():
    # ids 0..3 are a, b, c, d. "abc" (12) is made by a+bc at rank 3, and (abc, a) has rank 1:
    # after the first a+bc merges, abc+a must merge before the second a+bc does.
    table = {(1, 2): (0, 10), (0, 10): (3, 12), (12, 0): (1, 13)}
    ids = [0, 1, 2, 0, 1, 2, 3]
    assert rescanning_merges(ids, table) == [13, 10, 3]
    assert apply_merges(ids, table) == [13, 10, 3]


@pytest.mark.parametrize("seed", range(20))
def test_random_merge_tables_match_the_rescanning_loop(seed):
    """Tables in any rank order, some tokens with two merges, over words of 4 letters."""
    rng = random.Random(seed)
    table, made = {}, [0, 1, 2, 3]
    ranks = list(range(40))
    rng.shuffle(ranks)
    for rank in ranks:
        pair = (rng.choice(made), rng.choice(made))
        new_id = rng.choice(made[4:]) if len(made) > 4 and rng.random() < 0.2 else len(made)
        if pair in table:
            continue
        table[pair] = (rank, new_id)
        if new_id == len(made):
            made.append(new_id)
    for _ in range(20):
        ids = [rng.randrange(4) for _ in range(rng.randint(0, 60))]
        assert apply_merges(ids, table) == rescanning_merges(ids, table)


@pytest.mark.parametrize("seed", range(5))
def test_same_ids_as_the_rescanning_loop(gpt2, seed):
    rng = random.Random(seed)
    alphabet = rng.choice(["ab", "abc", "aeiourst", string.ascii_lowercase])
    word = letters(rng.randint(50, 3000), seed, alphabet)
    ids = [gpt2.byte_ids[byte] for byte in word.encode("utf-8")]
    assert apply_merges(ids, gpt2.merge_table) == rescanning_merges(ids, gpt2.merge_table)


@pytest.mark.parametrize("kind", ["one letter", "random letters"])
def test_a_long_word_matches_both_references(gpt2, tiktoken_gpt2, hf_gpt2, kind):
    text = "a" * LONG if kind == "one letter" else letters(LONG, seed=1)
    gpt2.word_cache.clear()
    ids = gpt2.encode(text)
    assert ids == hf_gpt2.encode(text).ids
    assert gpt2.decode(ids) == text
    # tiktoken's own merge loop is quadratic in a word's length: compare it on a shorter word
    short = text[:TIKTOKEN_LONG]
    assert gpt2.encode(short) == tiktoken_gpt2.encode_ordinary(short)
