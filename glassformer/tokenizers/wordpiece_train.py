"""Learning a WordPiece vocabulary from text: BPE merges over BERT's words, with the '##' prefix.

The vocabulary is learned as HF `tokenizers`' WordPieceTrainer learns it (its BpeTrainer with
continuing_subword_prefix="##"): the pair-count loop of bpe_train.py, over characters, not bytes.

    1. cut the text into words with BERT's basic tokenizer (wordpiece_basic.py: lower-case and
       strip accents unless cased, each punctuation character and each CJK character alone)
    2. ids: the special tokens first ([PAD] [UNK] [CLS] [SEP] [MASK] = 0..4), then the alphabet
       (the words' characters, by code point; with limit_alphabet, only the most frequent), then
       each character as a continuing piece ("##u"), numbered as the words meet them
    3. each word becomes its characters, all but the first with the prefix:  hugs -> h ##u ##g ##s
    4. count adjacent pairs over all words, weighted by how often the word occurs; the most frequent
       pair becomes a token, its right part without the prefix: (h, ##u) -> hu, (##g, ##s) -> ##gs
    5. repeat 4 until vocab_size ids, or until no pair occurs min_frequency times (or at all)

Only the vocabulary is kept: WordPiece encodes greedily, longest match first (wordpiece.py), and
never reads the merges.

Ties and numbering: on equal counts the pair with the smaller (left id, right id) wins, as in HF.
HF numbers the continuing pieces in the order its word hash map lists the words, which changes from
run to run (so do its tie-breaks: two HF runs on Tiny Shakespeare at 8,000 ids share about 7,990
tokens). We list the words in text order, so training is deterministic; `continuing_order` numbers
the named continuing pieces first (a test passes HF's order to reproduce one HF run exactly).

Incremental counts, with HF's bookkeeping. Pairs are counted once. A heap entry is
(count, pair, the words where the pair was counted); a merge walks only those words, left to right,
and reports each pair it broke (-count of the word) and made (+count):

    word "hugs" x3:  h ##u ##g ##s     merge (##u, ##g) -> ##ug
                     h ##ug ##s        (h, ##u) -3  (##g, ##s) -3  (h, ##ug) +3  (##ug, ##s) +3

A pair that was made gets a new entry listing the words where it was made; an entry whose count is
out of date when it reaches the top is pushed back with the current count.
subtle: as in HF, a merged pair keeps its count (a later merge that makes it anew adds to it), and a
pair counted in two entries is merged in two steps, the second adding no new token. Both are kept
so that the vocabulary is HF's; the cost stays about (pieces merged away) x (word length).
"""
from __future__ import annotations

import heapq
import itertools
import json
import re
from collections import Counter, defaultdict
from pathlib import Path
from typing import Callable, Iterable

from glassformer.errors import GlassformerError
from glassformer.tokenizers.wordpiece import WordPieceTokenizer
from glassformer.tokenizers.wordpiece_basic import (CJK_RANGES, WHITESPACE, basic_tokenize,
                                                   is_control, is_punctuation)

Pair = tuple[int, int]
BERT_SPECIALS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
PREFIX = "##"
# Cutting the text at whitespace and around each CJK ideograph and ASCII punctuation character
# gives the same words as the basic tokenizer would (it splits there too, and nothing it does joins
# across them), so it runs once per distinct chunk instead of once per character: "Citizen:" is
# the chunks "Citizen" and ":", a Chinese line one chunk per character.
# subtle: not at \x0b, \x0c, \x85: whitespace, but control characters, which cleaning removes
# ("a\x0bb" is the one word "ab").
SPACES = "".join(sorted(ch for ch in WHITESPACE if not is_control(ch)))
ALONE = [f"[{chr(low)}-{chr(high)}]" for low, high in CJK_RANGES] + [
    "[" + "".join(re.escape(chr(code)) for code in range(128) if is_punctuation(chr(code))) + "]"]
CHUNKS = re.compile("(" + "|".join(ALONE) + ")|[" + "".join(re.escape(ch) for ch in SPACES) + "]+")
BLOCK_CHARACTERS = 1 << 20


def count_words(text: str, *, lowercase: bool = True, strip_accents: bool | None = None) -> Counter:
    """Each word of BERT's basic tokenizer in `text` -> how often it occurs.

    >>> count_words("Hug, hug! 汉字")
    Counter({'hug': 2, ',': 1, '!': 1, '汉': 1, '字': 1})
    """
    chunk_counts: Counter = Counter()
    start = 0
    while start < len(text):  # a block of lines at a time: one block's chunks in memory
        end = text.find("\n", start + BLOCK_CHARACTERS)
        end = len(text) if end < 0 else end
        chunk_counts.update(CHUNKS.split(text[start:end]))
        start = end + 1
    chunk_counts.pop(None, None)   # what the whitespace matches leave (no CJK group)
    words: Counter = Counter()
    for chunk, count in chunk_counts.items():
        for word in basic_tokenize(chunk, lowercase=lowercase, strip_accents=strip_accents):
            words[word] += count
    return words


def choose_alphabet(word_counts: dict[str, int], limit: int | None) -> list[str]:
    """The characters of the words, by code point; with `limit`, only the most frequent ones.

    note: HF drops the rarest with an unstable sort; on equal counts we drop the later code point.
    """
    char_counts: Counter = Counter()
    for word, count in word_counts.items():
        for ch in word:
            char_counts[ch] += count
    kept = list(char_counts)
    if limit is not None and len(kept) > limit:
        kept = sorted(kept, key=lambda ch: (-char_counts[ch], ch))[:limit]
    return sorted(kept)


def add_token(piece: str, token_ids: dict[str, int], tokens: list[str]) -> int:
    """The id of `piece`, given the next free id if it is new."""
    if piece not in token_ids:
        token_ids[piece] = len(tokens)
        tokens.append(piece)
    return token_ids[piece]


def spell_words(word_counts: dict[str, int], alphabet: set[str], token_ids: dict[str, int],
                tokens: list[str]) -> tuple[list[list[int]], list[int]]:
    """Each word as the ids of its characters (h ##u ##g ##s), and each word's count.

    note: as in HF, a character outside the alphabet is dropped, and the one after a dropped
    first character still takes the prefix (the prefix marks "not at the word's start").
    """
    words: list[list[int]] = []
    counts: list[int] = []
    for word, count in word_counts.items():
        pieces = [ch if index == 0 else PREFIX + ch for index, ch in enumerate(word)
                  if ch in alphabet]
        words.append([add_token(piece, token_ids, tokens) for piece in pieces])
        counts.append(count)
    return words, counts


def count_pairs(words: list[list[int]], counts: list[int]
                ) -> tuple[dict[Pair, int], dict[Pair, set[int]]]:
    """Weighted count of every adjacent pair, and the words (by index) where each one occurs."""
    pair_counts: dict[Pair, int] = defaultdict(int)
    where: dict[Pair, set[int]] = defaultdict(set)
    for index, symbols in enumerate(words):
        for pair in zip(symbols, symbols[1:]):
            pair_counts[pair] += counts[index]
            where[pair].add(index)
    return pair_counts, where


def merge_word(symbols: list[int], pair: Pair, new_id: int) -> list[tuple[Pair, int]]:
    """Replace `pair` by new_id in one word, left to right; the pairs broken (-1) and made (+1).

    note: left to right matters for equal symbols: "a a a" merges as (a a) a.
    >>> word = [1, 2, 3]
    >>> merge_word(word, (2, 3), 9), word
    ([((1, 2), -1), ((1, 9), 1)], [1, 9])
    """
    left_id, right_id = pair
    changes: list[tuple[Pair, int]] = []
    i = 0
    while i < len(symbols) - 1:
        if symbols[i] == left_id and symbols[i + 1] == right_id:
            if i > 0:
                changes.append(((symbols[i - 1], left_id), -1))
                changes.append(((symbols[i - 1], new_id), 1))
            symbols[i:i + 2] = [new_id]
            if i < len(symbols) - 1:
                changes.append(((right_id, symbols[i + 1]), -1))
                changes.append(((new_id, symbols[i + 1]), 1))
        i += 1
    return changes


def merge_in_words(words: list[list[int]], counts: list[int], positions: Iterable[int], pair: Pair,
                   new_id: int, pair_counts: dict[Pair, int]) -> dict[Pair, set[int]]:
    """Merge `pair` in the listed words, update the counts; the pairs made -> where they were made."""
    made: dict[Pair, set[int]] = defaultdict(set)
    for index in positions:
        for changed, sign in merge_word(words[index], pair, new_id):
            pair_counts[changed] += sign * counts[index]
            if sign > 0:
                made[changed].add(index)
    return made


def merged_piece(left: str, right: str) -> str:
    """The token a merge makes: (h, ##u) -> hu, (##g, ##s) -> ##gs."""
    return left + (right[len(PREFIX):] if right.startswith(PREFIX) else right)


def check_room(vocab_size: int, n_ids: int, n_specials: int, n_characters: int) -> None:
    """One clear line when the ids before any merge do not fit in vocab_size.

    note: HF's trainer returns the larger vocabulary instead, without a word.
    """
    if n_ids > vocab_size:
        n_continuing = n_ids - n_specials - n_characters
        raise GlassformerError(
            f"vocab size {vocab_size} is too small: before any merge the text needs {n_ids} "
            f"ids ({n_specials} special tokens, {n_characters} characters, {n_continuing} "
            f"'##' continuing characters); use at least {n_ids}, or limit the alphabet")


def learn_vocab(word_counts: dict[str, int], vocab_size: int, *,
                special_tokens: Iterable[str] = BERT_SPECIALS, min_frequency: int = 0,
                limit_alphabet: int | None = None, continuing_order: tuple[str, ...] = (),
                on_merge: Callable[[], object] | None = None) -> list[str]:
    """The learned vocabulary, tokens in id order (steps 2-5 of the module docstring).

    continuing_order: '##' pieces to number first, in this order (those the words have).
    """
    tokens: list[str] = []
    token_ids: dict[str, int] = {}
    for piece in special_tokens:
        add_token(piece, token_ids, tokens)
    n_specials = len(tokens)
    alphabet = choose_alphabet(word_counts, limit_alphabet)
    for ch in alphabet:
        add_token(ch, token_ids, tokens)
    alphabet_set = set(alphabet)
    if continuing_order:
        continuing = {PREFIX + ch for word in word_counts for ch in word[1:] if ch in alphabet_set}
        for piece in continuing_order:
            if piece in continuing:
                add_token(piece, token_ids, tokens)
    words, counts = spell_words(word_counts, alphabet_set, token_ids, tokens)
    check_room(vocab_size, len(tokens), n_specials, len(alphabet))
    pair_counts, where = count_pairs(words, counts)
    serial = itertools.count()  # equal count and pair: the older entry first
    heap = [(-pair_counts[pair], pair, next(serial), positions) for pair, positions in where.items()]
    heapq.heapify(heap)
    while len(tokens) < vocab_size and heap:
        neg_count, pair, _, positions = heapq.heappop(heap)
        count = pair_counts[pair]
        if count != -neg_count:
            if count > 0:  # HF pushes a 0 back too, and stops when it comes up: the same end
                heapq.heappush(heap, (-count, pair, next(serial), positions))
            continue
        if count < min_frequency:
            break
        new_id = add_token(merged_piece(tokens[pair[0]], tokens[pair[1]]), token_ids, tokens)
        made = merge_in_words(words, counts, positions, pair, new_id, pair_counts)
        for made_pair, made_at in made.items():
            if pair_counts[made_pair] > 0:
                heapq.heappush(heap, (-pair_counts[made_pair], made_pair, next(serial), made_at))
        if on_merge is not None:
            on_merge()
    return tokens


def train_wordpiece(text: str, vocab_size: int, *, lowercase: bool = True,
                    strip_accents: bool | None = None,
                    special_tokens: Iterable[str] = BERT_SPECIALS, min_frequency: int = 0,
                    limit_alphabet: int | None = None, continuing_order: tuple[str, ...] = (),
                    on_merge: Callable[[], object] | None = None) -> WordPieceTokenizer:
    """A BERT WordPiece tokenizer with at most `vocab_size` ids learned from `text`.

    lowercase=False keeps case and accents (a "cased" BERT); strip_accents=None follows lowercase.
    Stops early, with fewer ids, when no pair occurs min_frequency times (or at all).
    """
    specials = list(special_tokens)
    missing = [token for token in ("[UNK]", "[CLS]", "[SEP]", "[PAD]") if token not in specials]
    if missing:
        raise GlassformerError(f"the special tokens must include {', '.join(missing)} "
                               f"(BERT's [PAD] [UNK] [CLS] [SEP] [MASK])")
    if limit_alphabet is not None and limit_alphabet < 1:
        raise GlassformerError(f"limit_alphabet must be at least 1, got {limit_alphabet}")
    if not text:
        raise GlassformerError("the training text is empty: there is nothing to learn a vocabulary from")
    word_counts = count_words(text, lowercase=lowercase, strip_accents=strip_accents)
    if not word_counts:
        raise GlassformerError("the training text has no words (only spaces or control "
                               "characters): there is nothing to learn a vocabulary from")
    tokens = learn_vocab(word_counts, vocab_size, special_tokens=specials,
                         min_frequency=min_frequency, limit_alphabet=limit_alphabet,
                         continuing_order=continuing_order, on_merge=on_merge)
    vocab = {token: token_id for token_id, token in enumerate(tokens)}
    return WordPieceTokenizer(vocab, lowercase=lowercase, strip_accents=strip_accents,
                              prefix=PREFIX)


def write_bert_config(folder: str | Path, tokenizer: WordPieceTokenizer) -> Path:
    """tokenizer_config.json as transformers writes it for a BERT tokenizer, so that
    BertTokenizerFast / AutoTokenizer.from_pretrained(folder) read casing and tokens from it."""
    names = tokenizer.special_names
    decoder = {str(token_id): {"content": token, "lstrip": False, "normalized": False,
                               "rstrip": False, "single_word": False, "special": True}
               for token, token_id in sorted(tokenizer.special_tokens.items(),
                                             key=lambda item: item[1])}
    layout = {"added_tokens_decoder": decoder, "clean_up_tokenization_spaces": True,
              "do_lower_case": tokenizer.basic_options["lowercase"],
              "strip_accents": tokenizer.basic_options["strip_accents"],
              "tokenize_chinese_chars": tokenizer.basic_options["split_chinese"],
              **{name: token for name, token in names.items() if token in tokenizer.vocab},
              "tokenizer_class": "BertTokenizer"}
    target = Path(folder) / "tokenizer_config.json"
    target.write_text(json.dumps(layout, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    return target
