"""Byte-level BPE (GPT-2, SmolLM2, tiktoken files): encode with merges by rank, decode bytes.

Encoding one text (Sennrich et al. 2016; byte-level as in GPT-2, Radford et al. 2019):

    1. special tokens the caller allowed (`allowed_special`, none by default: base.py) are cut
       out whole and map straight to their ids; any other `<|endoftext|>` is plain text
    2. the pre-tokenizer regex cuts the rest into words: "Hello world" -> "Hello", " world"
    3. each word becomes its UTF-8 bytes, one single-byte token each: " world" -> 6 ids
    4. repeatedly merge the adjacent pair with the lowest merge rank (learned earliest) until no
       adjacent pair has a merge: " w o r l d" -> ... -> " world" (one id, 995 in GPT-2)

Decoding concatenates each id's bytes and decodes UTF-8 (invalid bytes become U+FFFD, as in
tiktoken and HF). Reference matched: tiktoken and HF `tokenizers` BPE, id for id.

Step 4 depends only on the word, so its result is memoised per word in `word_cache`, a dict the
tokenizer owns and hands explicitly to `encode_words`; it never changes a result, only skips
repeating work (Tiny Shakespeare has 298k words but 15k distinct ones).

Files: `save` writes vocab.json + merges.txt (GPT-2's layout) and tokenizer.json (HF's); `load`
reads tokenizer.json, or a vocab.json + merges.txt pair alone (`from_vocab_files`).
"""
from __future__ import annotations

import heapq
import json
from collections import defaultdict
from pathlib import Path
from typing import Callable, Iterable

import numpy as np

from glassformer.errors import GlassformerError
from glassformer.tokenizers import hf_json
from glassformer.tokenizers.base import (TOKENIZER_JSON, AllowedSpecial, Tokenizer,
                                         allowed_specials, check_ids, json_path, read_layout,
                                         split_on_specials)
from glassformer.tokenizers.bytelevel import (bytes_to_unicode, spell_bytes, unicode_to_bytes,
                                              unspell)
from glassformer.tokenizers.pretokenize import PreTokenizer

WORD_CACHE_LIMIT = 100_000  # distinct words memoised before the cache is emptied (bounds memory)

# (left id, right id) -> (rank, id of the merged token); lower rank = learned earlier = merged first
MergeTable = dict[tuple[int, int], tuple[int, int]]
# The entry of a pair that has no merge: its rank sorts after every real rank.
NO_MERGE = (float("inf"), -1)


def build_merge_table(vocab: dict[bytes, int], merges: list[tuple[bytes, bytes]]) -> MergeTable:
    """The merge table of `merges` (rank = position in the list); checks every token exists."""
    return merge_table_of(merge_ids(vocab, merges))


def merge_ids(vocab: dict, merges: Iterable[tuple], skip: dict | None = None) -> np.ndarray:
    """(M, 3) int32: each merge's (left id, right id, merged id), by rank; checks every token
    exists. vocab maps token bytes, or vocab-file spellings ('Ġthe'), to ids: a pair joins the
    same way in both; tokens in `skip` (special tokens in a spelled vocab) count as absent.

    note: ids instead of a list of byte pairs: SmolLM2's 48,900 merges are 0.6 MB here, about
    8 MB as Python tuples of bytes (docs/performance.md, issue 44's memory section)."""
    skip = skip or {}
    rows = []
    for rank, (left, right) in enumerate(merges):
        for part in (left, right, left + right):
            if part not in vocab or part in skip:
                raise GlassformerError(f"merge {rank} ({left!r}, {right!r}) uses {part!r}, "
                                       "which is not in the vocabulary")
        rows.append((vocab[left], vocab[right], vocab[left + right]))
    return np.array(rows, dtype=np.int32).reshape(-1, 3)


def merge_table_of(ids: np.ndarray) -> MergeTable:
    """(left id, right id) -> (rank, merged id) of merge_ids' rows; a pair listed twice keeps its
    first (lowest) rank.

    note: every entry's numbers are one shared int object per value (`number`), not fresh ones:
    tolist() and enumerate make four 28-byte ints an entry, most of them repeats (an id takes
    part in many merges), 5.5 MB of SmolLM2's 13 MB table (docs/performance.md, helper memq)."""
    rows = ids.tolist()
    number = list(range(max(len(rows), int(ids.max(initial=-1)) + 1)))
    table: MergeTable = {}
    for rank, (left, right, merged) in enumerate(rows):
        table.setdefault((number[left], number[right]), (number[rank], number[merged]))
    return table


def apply_merges(ids: list[int], merge_table: MergeTable) -> list[int]:
    """Merge adjacent pairs of `ids`, lowest rank first, until none of them can merge.

    Each step merges the leftmost pair of lowest rank (what tiktoken does). The parts form a
    linked list (`after[i]`, `before[i]`: the index of the next and previous live part, -1 at the
    ends), so a merge is O(1): part i takes the merged id and part after[i] leaves the list. The
    pairs wait in buckets, one list of left positions per rank, and a heap holds the ranks that
    have a bucket: the lowest rank's bucket, sorted, is merged left to right, which is the same
    as merging its leftmost pair again and again (merging a pair never makes a pair of the same
    rank). O(n log n) in the length n of the word, not O(n^2) as rescanning is.

        parts  h e l l o    buckets  he: [0]  el: [1]  ll: [2]  lo: [3]   ('ll' lowest rank)
        merge  h e ll _ o   after[2] = 4, before[4] = 2; e+ll waits at 1, ll+o at 2

    note: a bucket holds positions, not a heap entry per pair: a run such as 1M x 'a' then costs
    a sort per rank instead of a heap operation per pair (about 2x faster on it).
    subtle: positions are never removed when their pair changes; a position whose part is gone,
    or whose pair no longer has that rank, is stale and skipped (a part only grows, so a changed
    pair never comes back).
    """
    parts: list[int | None] = list(ids)
    n = len(parts)
    after = list(range(1, n)) + [-1]
    before = list(range(-1, n - 1))
    lookup = merge_table.get  # note: a local name; a 1M-letter word makes millions of calls
    waiting = defaultdict(list, pairs_by_rank(parts, merge_table))  # rank -> left positions
    ranks = list(waiting)
    heapq.heapify(ranks)
    while ranks:
        rank = heapq.heappop(ranks)
        places = waiting.pop(rank)
        if len(places) > 1:
            places.sort()  # left to right (most buckets of a short word hold one pair)
        for k, i in enumerate(places):
            right = after[i]
            if right < 0 or parts[i] is None:
                continue  # stale: part i was merged into its left neighbour, or is now the last
            entry = lookup((parts[i], parts[right]), NO_MERGE)
            if entry[0] != rank:
                continue  # stale: part i or its right neighbour changed since it was listed
            merged = parts[i] = entry[1]
            parts[right] = None
            right = after[i] = after[right]
            left = before[i]
            if right >= 0:
                before[right] = i
            # the two new pairs wait in their ranks' buckets (a new bucket's rank joins the
            # heap): (left part, merged) at `left`, (merged, right part) at i
            entry = lookup((parts[left], merged)) if left >= 0 else None
            if entry is not None:
                if entry[0] not in waiting:
                    heapq.heappush(ranks, entry[0])
                waiting[entry[0]].append(left)
            entry = lookup((merged, parts[right])) if right >= 0 else None
            if entry is not None:
                if entry[0] not in waiting:
                    heapq.heappush(ranks, entry[0])
                waiting[entry[0]].append(i)
            if ranks and ranks[0] < rank:
                # subtle: a merge list that gives one token two merges can make a pair that
                # ranks before this one (every other waiting rank is above it: the heap's
                # lowest is new): it merges first, then the rest of this bucket
                if rank not in waiting:
                    heapq.heappush(ranks, rank)
                waiting[rank].extend(places[k + 1:])
                break
    return [part for part in parts if part is not None]


def pairs_by_rank(parts: list[int], merge_table: MergeTable) -> dict[int, list[int]]:
    """rank -> the positions i (in increasing order) where (parts[i], parts[i + 1]) has it."""
    waiting: dict[int, list[int]] = {}
    for i in range(len(parts) - 1):
        entry = merge_table.get((parts[i], parts[i + 1]))
        if entry is not None:
            waiting.setdefault(entry[0], []).append(i)
    return waiting


def encode_words(words: list[str], encode_word: Callable[[str], list[int]],
                 cache: dict[str, list[int]]) -> list[int]:
    """Concatenated ids of `words`, looking each word up in `cache` before running encode_word."""
    if len(cache) > WORD_CACHE_LIMIT:
        cache.clear()
    ids: list[int] = []
    for word in words:
        word_ids = cache.get(word)
        if word_ids is None:
            word_ids = encode_word(word)
            cache[word] = word_ids
        ids.extend(word_ids)
    return ids


class BPETokenizer(Tokenizer):
    """Byte-level BPE from a vocabulary (token bytes -> id) and merges (pairs of token bytes)."""

    def __init__(self, vocab: dict[bytes, int], merges: list[tuple[bytes, bytes]], *,
                 pretokenizer: PreTokenizer | str = "gpt2",
                 special_tokens: dict[str, int] | None = None, ignore_merges: bool = False,
                 merge_id_rows: np.ndarray | None = None):
        self.vocab = dict(vocab)
        # the merges as (left, right, merged) ids (merge_ids); `merges` gives their bytes back.
        # merge_id_rows: the same already made (from_spelled), `merges` then unused
        self.merge_id_rows = (merge_ids(self.vocab, merges) if merge_id_rows is None
                              else merge_id_rows)
        self.pretokenizer = (pretokenizer if isinstance(pretokenizer, PreTokenizer)
                             else PreTokenizer.named(pretokenizer))
        self.specials = dict(special_tokens or {})
        # ignore_merges (LLaMA-3 files): a word that is itself a token skips the merge loop.
        self.ignore_merges = ignore_merges
        self.merge_table = merge_table_of(self.merge_id_rows)
        # byte value -> id of its single-byte token (None if the vocabulary lacks that byte)
        self.byte_ids = [self.vocab.get(bytes([byte])) for byte in range(256)]
        size = 1 + max(list(self.vocab.values()) + list(self.specials.values()))
        self.id_to_bytes: list[bytes | None] = [None] * size  # None marks an unassigned id
        for token, token_id in self.vocab.items():
            self.id_to_bytes[token_id] = token
        for token, token_id in self.specials.items():
            self.id_to_bytes[token_id] = token.encode("utf-8")
        self.word_cache: dict[str, list[int]] = {}  # word -> ids; see the module docstring

    @property
    def vocab_size(self) -> int:
        return len(self.id_to_bytes)

    @property
    def special_tokens(self) -> dict[str, int]:
        return dict(self.specials)

    @property
    def merges(self) -> list[tuple[bytes, bytes]]:
        """The merges as pairs of token bytes, by rank (made on each call from merge_id_rows)."""
        token_of = {token_id: token for token, token_id in self.vocab.items()}
        return [(token_of[left], token_of[right])
                for left, right, _ in self.merge_id_rows.tolist()]

    def encode(self, text: str, allowed_special: AllowedSpecial = ()) -> list[int]:
        """Text -> ids; special-token strings are plain text unless `allowed_special` names them
        (tiktoken's convention: "all" gives HF tokenizers' and tiktoken's allowed_special="all")."""
        allowed = allowed_specials(allowed_special, self.specials)
        ids: list[int] = []
        for chunk, is_special in split_on_specials(text, allowed):
            ids.extend([self.specials[chunk]] if is_special else self.encode_ordinary(chunk))
        return ids

    def encode_ordinary(self, text: str) -> list[int]:
        """Text -> ids, treating special-token strings as plain text (tiktoken's encode_ordinary)."""
        return encode_words(self.pretokenizer.split(text), self.encode_word, self.word_cache)

    def encode_word(self, word: str) -> list[int]:
        """One pre-token -> ids: its bytes as single-byte tokens, then the merge loop."""
        try:
            data = word.encode("utf-8")
        except UnicodeEncodeError as err:
            bad = word[err.start]
            raise GlassformerError(f"text holds the lone surrogate U+{ord(bad):04X}, which has no "
                                   "UTF-8 bytes to encode") from None
        if self.ignore_merges and data in self.vocab:
            return [self.vocab[data]]
        ids = [self.byte_ids[byte] for byte in data]
        if None in ids:
            missing = data[ids.index(None)]
            raise GlassformerError(f"byte 0x{missing:02x} of {word!r} has no token in this vocabulary")
        return apply_merges(ids, self.merge_table)

    def decode(self, ids: Iterable[int]) -> str:
        """Ids -> text; bytes that are not valid UTF-8 (a cut character) become U+FFFD."""
        id_list = check_ids(ids, self.vocab_size)
        pieces = [self.id_to_bytes[token_id] for token_id in id_list]
        if None in pieces:
            raise GlassformerError(f"id {id_list[pieces.index(None)]} is not assigned to any token")
        return b"".join(pieces).decode("utf-8", errors="replace")

    def token_bytes(self, token_id: int) -> bytes:
        """The bytes one id stands for (a special token's UTF-8 text)."""
        token_id = check_ids([token_id], self.vocab_size)[0]
        data = self.id_to_bytes[token_id]
        if data is None:
            raise GlassformerError(f"id {token_id} is not assigned to any token")
        return data

    def id_to_piece(self, token_id: int) -> str:
        """The vocab.json spelling ('Ġworld'), or the special token's text."""
        data = self.token_bytes(token_id)
        if token_id in self.specials.values():
            return data.decode("utf-8")
        return spell_bytes(data, bytes_to_unicode())

    # --- files ----------------------------------------------------------------------------------

    def spelled_vocab(self) -> dict[str, int]:
        """vocab.json contents: spelled token -> id, special tokens included, in id order."""
        table = bytes_to_unicode()
        spelled = {spell_bytes(token, table): token_id for token, token_id in self.vocab.items()}
        spelled.update(self.specials)
        return dict(sorted(spelled.items(), key=lambda item: item[1]))

    def spelled_merges(self) -> list[tuple[str, str]]:
        table = bytes_to_unicode()
        return [(spell_bytes(left, table), spell_bytes(right, table)) for left, right in self.merges]

    def save(self, path: str | Path) -> Path:
        """Write vocab.json, merges.txt and tokenizer.json into the folder `path`; returns the last.

        vocab.json + merges.txt are GPT-2's layout; tokenizer.json also records the pre-tokenizer
        and special tokens, and loads in HF `tokenizers` (Tokenizer.from_file); a chat template
        and named tokens go to tokenizer_config.json + chat_template.jinja (`save_config`).
        """
        folder = Path(path)
        folder.mkdir(parents=True, exist_ok=True)
        vocab, merges = self.spelled_vocab(), self.spelled_merges()
        (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
        lines = ["#version: 0.2"] + [f"{left} {right}" for left, right in merges]
        (folder / "merges.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
        layout = hf_json.bpe_layout(vocab, merges, self.pretokenizer.pattern,
                                    self.pretokenizer.split_digits, self.specials)
        return self.save_layout(folder / TOKENIZER_JSON, layout)

    @classmethod
    def load(cls, path: str | Path) -> "BPETokenizer":
        """Read a folder written by `save`: its tokenizer.json, else its vocab.json + merges.txt."""
        folder = Path(path)
        if not json_path(path).is_file() and (folder / "vocab.json").is_file():
            return cls.from_vocab_files(folder / "vocab.json", folder / "merges.txt")
        source, layout = read_layout(path, "BPE")
        return cls.from_hf_layout(layout, str(source))

    @classmethod
    def from_vocab_files(cls, vocab_path: Path, merges_path: Path,
                         pretokenizer: str = "gpt2") -> "BPETokenizer":
        """A GPT-2 style pair: vocab.json + merges.txt (or OpenAI's encoder.json + vocab.bpe)."""
        if not merges_path.is_file():
            raise GlassformerError(f"{vocab_path} has no merges file beside it: expected "
                                   f"{merges_path}")
        vocab = json.loads(vocab_path.read_text(encoding="utf-8"))
        merges = read_merges_txt(merges_path)
        if not merges:
            raise GlassformerError(f"{merges_path} holds no merges")
        specials = specials_from_config(vocab_path.parent, vocab)
        return cls.from_spelled(vocab, merges, pretokenizer, specials, source=str(vocab_path))

    @classmethod
    def from_hf_layout(cls, layout: dict, source: str = "<dict>") -> "BPETokenizer":
        """Build from a parsed HF tokenizer.json layout; `source` only names the file in errors."""
        vocab, merges, ignore_merges = hf_json.read_bpe_model(layout, source)
        pattern, split_digits = hf_json.read_byte_level_pretokenizer(layout.get("pre_tokenizer"),
                                                                     source)
        return cls.from_spelled(vocab, merges, PreTokenizer.matching(pattern, split_digits),
                                hf_json.read_added_tokens(layout), ignore_merges, source)

    @classmethod
    def from_spelled(cls, vocab: dict[str, int], merges: list[tuple[str, str]],
                     pretokenizer: PreTokenizer | str = "gpt2",
                     special_tokens: dict[str, int] | None = None, ignore_merges: bool = False,
                     source: str = "<vocab>") -> "BPETokenizer":
        """Build from vocab-file spellings ('Ġthe'); special tokens are kept out of the byte vocab."""
        inverse = unicode_to_bytes()
        specials = dict(special_tokens or {})
        byte_vocab: dict[bytes, int] = {}
        for spelling, token_id in vocab.items():
            if spelling in specials:
                continue
            try:
                byte_vocab[unspell(spelling, inverse)] = token_id
            except KeyError:
                raise GlassformerError(f"{source}: token {spelling!r} (id {token_id}) is not "
                                       "spelled in the byte-level alphabet") from None
        try:  # the merges' ids straight from their spellings: no bytes made for each side
            rows = merge_ids(vocab, merges, skip=specials)
        except GlassformerError:  # named again from their bytes, as the byte-level table sees them
            rows = merge_ids(byte_vocab, unspelled_merges(merges, inverse, source))
        return cls(byte_vocab, (), pretokenizer=pretokenizer, special_tokens=specials,
                   ignore_merges=ignore_merges, merge_id_rows=rows)


def unspelled_merges(merges: list[tuple[str, str]], inverse: dict[str, int],
                     source: str) -> list[tuple[bytes, bytes]]:
    """Spelled merge pairs -> pairs of bytes; a character outside the byte-level alphabet is an
    error naming the merge."""
    byte_merges = []
    for rank, (left, right) in enumerate(merges):
        try:
            byte_merges.append((unspell(left, inverse), unspell(right, inverse)))
        except KeyError:
            raise GlassformerError(f"{source}: merge {rank} ({left} {right}) is not spelled "
                                   "in the byte-level alphabet") from None
    return byte_merges


def read_merges_txt(path: Path) -> list[tuple[str, str]]:
    """Merge pairs of a merges.txt / vocab.bpe, skipping the '#version' header and blank lines."""
    merges = []
    for number, line in enumerate(path.read_text(encoding="utf-8").split("\n"), start=1):
        if not line or (number == 1 and line.startswith("#version")):
            continue
        pair = line.split(" ")
        if len(pair) != 2:
            raise GlassformerError(f"{path}:{number}: a merge is two tokens and a space, got {line!r}")
        merges.append((pair[0], pair[1]))
    return merges


def specials_from_config(folder: Path, vocab: dict[str, int]) -> dict[str, int]:
    """`<|...|>` tokens of the vocab, plus tokenizer_config.json's added_tokens_decoder specials."""
    specials = {token: token_id for token, token_id in vocab.items()
                if token.startswith("<|") and token.endswith("|>")}
    config_path = folder / "tokenizer_config.json"
    if config_path.is_file():
        config = json.loads(config_path.read_text(encoding="utf-8"))
        for token_id, entry in (config.get("added_tokens_decoder") or {}).items():
            if entry.get("special"):
                specials[entry["content"]] = int(token_id)
    return specials
