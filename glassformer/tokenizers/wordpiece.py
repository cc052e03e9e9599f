"""BERT's WordPiece: greedy longest-match-first subwords, [CLS]/[SEP], pairs, padding, truncation.

After the basic tokenizer (wordpiece_basic.py) has cut the text into words, each word is cut into
the longest vocabulary entry that starts it, then the longest that continues it (spelled with the
'##' prefix), and so on (Wu et al. 2016; Devlin et al. 2019):

    "unaffable" -> "un" + "##aff" + "##able"        (assuming those three are in the vocabulary)
    a word longer than 100 characters, or with a remainder no entry matches -> "[UNK]" (whole word)

A sequence is wrapped as [CLS] A [SEP] with token type ids 0, and a pair as
[CLS] A [SEP] B [SEP] with type ids 0 for [CLS] A [SEP] and 1 for B [SEP]; [CLS] and [SEP] go in
by id. "[SEP]" typed in the text is plain text ("[", "sep", "]") unless the caller allows it
(`allowed_special`, base.py), as HF does with split_special_tokens=True. Truncation cuts the
words' ids before the specials are added; padding appends [PAD] with attention mask 0.
Reference matched: HF BertTokenizerFast (tokenizers' WordPiece, TemplateProcessing, LongestFirst).
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Iterable, NamedTuple

from glassformer.errors import GlassformerError
from glassformer.tokenizers import hf_json
from glassformer.tokenizers.base import (TOKENIZER_JSON, AllowedSpecial, Tokenizer,
                                         allowed_specials, check_ids, split_on_specials)
from glassformer.tokenizers.wordpiece_basic import basic_tokenize

# What `decode` tidies after joining pieces with spaces (HF's `cleanup`, from Google's BERT).
CLEANUP = ((" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't"),
           (" 'm", "'m"), (" do not", " don't"), (" 's", "'s"), (" 've", "'ve"), (" 're", "'re"))


class Encoding(NamedTuple):
    """One encoded sequence (or pair), all three lists the same length."""
    ids: list[int]
    type_ids: list[int]        # 0 for the first sequence, 1 for the second
    attention_mask: list[int]  # 1 for real tokens, 0 for padding


def wordpiece_word(word: str, vocab: dict[str, int], *, unk_token: str = "[UNK]",
                   prefix: str = "##", max_chars: int = 100) -> list[str]:
    """Greedy longest-match-first pieces of one word, or [unk_token] if it cannot be covered.

    >>> wordpiece_word("unaffable", {"un": 0, "##aff": 1, "##able": 2})
    ['un', '##aff', '##able']
    """
    if len(word) > max_chars:
        return [unk_token]
    pieces: list[str] = []
    start = 0
    while start < len(word):
        end = len(word)
        while end > start:  # shrink the candidate from the right until it is in the vocabulary
            candidate = word[start:end] if start == 0 else prefix + word[start:end]
            if candidate in vocab:
                break
            end -= 1
        if end == start:
            return [unk_token]  # note: one uncoverable piece makes the whole word unknown
        pieces.append(candidate)
        start = end
    return pieces


def truncated_lengths(len_a: int, len_b: int | None, budget: int) -> tuple[int, int | None]:
    """How many ids of A (and B) to keep so they fit `budget`: HF's LongestFirst rule.

    A single sequence keeps its first `budget` ids. For a pair, the shorter one is kept whole if
    the longer one can absorb the whole cut; otherwise each gets half, the longer the odd one.
    """
    if len_b is None:
        return min(len_a, budget), None
    if len_a + len_b <= budget:
        return len_a, len_b
    short, long = min(len_a, len_b), max(len_a, len_b)
    long = short if short > budget else max(short, budget - short)
    if short + long > budget:
        short = budget // 2
        long = short + budget % 2
    # subtle: the `a longer` test is strict, so on equal lengths B gets the odd extra id, as in HF.
    return (long, short) if len_a > len_b else (short, long)


class WordPieceTokenizer(Tokenizer):
    """A BERT tokenizer: basic tokenizer, then WordPiece over a vocabulary (token -> id)."""

    def __init__(self, vocab: dict[str, int], *, unk_token: str = "[UNK]",
                 cls_token: str = "[CLS]", sep_token: str = "[SEP]", pad_token: str = "[PAD]",
                 mask_token: str = "[MASK]", prefix: str = "##", max_chars_per_word: int = 100,
                 lowercase: bool = True, strip_accents: bool | None = None,
                 clean_text: bool = True, split_chinese: bool = True):
        self.vocab = dict(vocab)
        self.id_to_token = {token_id: token for token, token_id in self.vocab.items()}
        self.n_ids = 1 + max(self.vocab.values())
        names = dict(pad_token=pad_token, unk_token=unk_token, cls_token=cls_token,
                     sep_token=sep_token, mask_token=mask_token)
        for name in ("unk_token", "cls_token", "sep_token", "pad_token"):
            if names[name] not in self.vocab:
                raise GlassformerError(f"{name} {names[name]!r} is not in the vocabulary")
        self.special_names = names
        self.specials = {token: self.vocab[token] for token in names.values() if token in self.vocab}
        self.prefix = prefix
        self.max_chars_per_word = max_chars_per_word
        self.basic_options = dict(lowercase=lowercase, clean_text=clean_text,
                                  split_chinese=split_chinese,
                                  strip_accents=lowercase if strip_accents is None else strip_accents)

    @property
    def vocab_size(self) -> int:
        return self.n_ids

    @property
    def special_tokens(self) -> dict[str, int]:
        return dict(self.specials)

    def tokenize(self, text: str, allowed_special: AllowedSpecial = ()) -> list[str]:
        """Text -> WordPiece tokens, without [CLS]/[SEP]; the special tokens `allowed_special`
        names stay whole, any other "[SEP]" in the text is plain text."""
        pieces: list[str] = []
        allowed = allowed_specials(allowed_special, self.specials)
        for chunk, is_special in split_on_specials(text, allowed):
            if is_special:
                pieces.append(chunk)
                continue
            for word in basic_tokenize(chunk, **self.basic_options):
                pieces.extend(wordpiece_word(word, self.vocab, unk_token=self.special_names["unk_token"],
                                             prefix=self.prefix, max_chars=self.max_chars_per_word))
        return pieces

    def encode(self, text: str, allowed_special: AllowedSpecial = (), *,
               add_special_tokens: bool = True) -> list[int]:
        """Text -> ids, as [CLS] ... [SEP] (inserted by id) unless add_special_tokens is False."""
        return self.encode_plus(text, add_special_tokens=add_special_tokens,
                                allowed_special=allowed_special).ids

    def encode_plus(self, text: str, pair: str | None = None, *, add_special_tokens: bool = True,
                    max_length: int | None = None, truncation: bool = False,
                    padding: bool | str = False, allowed_special: AllowedSpecial = ()) -> Encoding:
        """One text or a pair -> Encoding(ids, type_ids, attention_mask).

        truncation=True cuts to max_length (specials included); padding='max_length' (or True)
        pads to max_length. allowed_special: see `tokenize`.
        """
        ids_a = [self.vocab[piece] for piece in self.tokenize(text, allowed_special)]
        ids_b = None if pair is None else [self.vocab[piece]
                                           for piece in self.tokenize(pair, allowed_special)]
        if truncation:
            if max_length is None:
                raise GlassformerError("truncation needs max_length")
            n_specials = (3 if ids_b is not None else 2) if add_special_tokens else 0
            if max_length < n_specials:
                raise GlassformerError(f"max_length {max_length} cannot even hold the "
                                       f"{n_specials} special tokens")
            keep_a, keep_b = truncated_lengths(len(ids_a), None if ids_b is None else len(ids_b),
                                               max_length - n_specials)
            ids_a = ids_a[:keep_a]
            ids_b = None if ids_b is None else ids_b[:keep_b]
        encoding = self.wrap(ids_a, ids_b, add_special_tokens)
        if padding:
            if max_length is None:
                raise GlassformerError("padding to max_length needs max_length")
            encoding = self.pad(encoding, max_length)
        return encoding

    def encode_batch(self, texts: list[str], pairs: list[str] | None = None, *,
                     add_special_tokens: bool = True, max_length: int | None = None,
                     truncation: bool = False, padding: bool | str = False,
                     allowed_special: AllowedSpecial = ()) -> list[Encoding]:
        """encode_plus over a batch; padding='longest' pads to the batch's longest encoding."""
        if pairs is not None and len(pairs) != len(texts):
            raise GlassformerError(f"got {len(texts)} texts but {len(pairs)} pairs")
        encodings = [self.encode_plus(text, None if pairs is None else pairs[k],
                                      add_special_tokens=add_special_tokens, max_length=max_length,
                                      truncation=truncation, allowed_special=allowed_special,
                                      padding=padding if padding != "longest" else False)
                     for k, text in enumerate(texts)]
        if padding == "longest":
            longest = max((len(encoding.ids) for encoding in encodings), default=0)
            encodings = [self.pad(encoding, longest) for encoding in encodings]
        return encodings

    def wrap(self, ids_a: list[int], ids_b: list[int] | None, add_special_tokens: bool) -> Encoding:
        """[CLS] A [SEP] (B [SEP]) with type ids 0...0 (1...1) and an all-ones mask."""
        cls_id = self.vocab[self.special_names["cls_token"]]
        sep_id = self.vocab[self.special_names["sep_token"]]
        first = [cls_id] + ids_a + [sep_id] if add_special_tokens else list(ids_a)
        second = [] if ids_b is None else (ids_b + [sep_id] if add_special_tokens else list(ids_b))
        ids = first + second
        return Encoding(ids, [0] * len(first) + [1] * len(second), [1] * len(ids))

    def pad(self, encoding: Encoding, length: int) -> Encoding:
        """Append [PAD] (type id 0, mask 0) up to `length`; longer encodings are left alone."""
        missing = max(0, length - len(encoding.ids))
        pad_id = self.vocab[self.special_names["pad_token"]]
        return Encoding(encoding.ids + [pad_id] * missing, encoding.type_ids + [0] * missing,
                        encoding.attention_mask + [0] * missing)

    def decode(self, ids: Iterable[int], *, skip_special_tokens: bool = False) -> str:
        """Join pieces with spaces, glue '##' continuations on, then tidy punctuation spacing."""
        pieces = [self.id_to_piece(token_id) for token_id in check_ids(ids, self.vocab_size)]
        if skip_special_tokens:
            pieces = [piece for piece in pieces if piece not in self.specials]
        text = ""
        for index, piece in enumerate(pieces):
            if index > 0:
                # note: HF strips the prefix from a leading piece only when it is not the first
                piece = piece[len(self.prefix):] if piece.startswith(self.prefix) else " " + piece
            for old, new in CLEANUP:
                piece = piece.replace(old, new)
            text += piece
        return text

    def id_to_piece(self, token_id: int) -> str:
        token_id = check_ids([token_id], self.vocab_size)[0]
        if token_id not in self.id_to_token:
            raise GlassformerError(f"id {token_id} is not assigned to any token")
        return self.id_to_token[token_id]

    # --- files ----------------------------------------------------------------------------------

    def save(self, path: str | Path) -> Path:
        """Write vocab.txt (one token a line, id = line number) and tokenizer.json into `path`."""
        folder = Path(path)
        folder.mkdir(parents=True, exist_ok=True)
        tokens = [self.id_to_token.get(token_id, "") for token_id in range(self.vocab_size)]
        (folder / "vocab.txt").write_text("\n".join(tokens) + "\n", encoding="utf-8")
        layout = hf_json.wordpiece_layout(
            self.vocab, unk_token=self.special_names["unk_token"], prefix=self.prefix,
            max_chars_per_word=self.max_chars_per_word, special_tokens=self.specials,
            cls_token=self.special_names["cls_token"], sep_token=self.special_names["sep_token"],
            **self.basic_options)
        return self.save_layout(folder / TOKENIZER_JSON, layout)

    @classmethod
    def load(cls, path: str | Path) -> "WordPieceTokenizer":
        """A folder (or file) with tokenizer.json, or with vocab.txt (BERT uncased defaults)."""
        path = Path(path)
        folder = path if path.is_dir() else path.parent
        if path.name == TOKENIZER_JSON or (path.is_dir() and (path / TOKENIZER_JSON).is_file()):
            source = folder / TOKENIZER_JSON
            layout = json.loads(source.read_text(encoding="utf-8"))
            return cls(**hf_json.read_wordpiece_model(layout, str(source)))
        vocab_txt = path if path.is_file() else path / "vocab.txt"
        if not vocab_txt.is_file():
            raise GlassformerError(f"no WordPiece tokenizer at {path}: need tokenizer.json or vocab.txt")
        return cls.from_vocab_txt(vocab_txt)

    @classmethod
    def from_vocab_txt(cls, vocab_txt: str | Path, **options) -> "WordPieceTokenizer":
        """Vocabulary from a BERT vocab.txt; lower-casing follows tokenizer_config.json beside it."""
        vocab_txt = Path(vocab_txt)
        lines = vocab_txt.read_text(encoding="utf-8").split("\n")
        if lines and lines[-1] == "":
            lines.pop()  # the newline that ends the last line
        vocab = {token: token_id for token_id, token in enumerate(lines)}
        config_path = vocab_txt.parent / "tokenizer_config.json"
        if config_path.is_file() and "lowercase" not in options:
            config = json.loads(config_path.read_text(encoding="utf-8"))
            options["lowercase"] = config.get("do_lower_case", True)
        return cls(vocab, **options)
