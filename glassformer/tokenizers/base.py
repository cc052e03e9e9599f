"""The interface every glassformer tokenizer shares, and three helpers they all use.

A tokenizer turns text into a list of integer ids and back:

    ids = tok.encode("To be, or not")     # list[int], every id in range(tok.vocab_size)
    tok.decode(ids) == "To be, or not"      # for char and byte-level BPE, exactly

Special tokens (`<|endoftext|>`, `[CLS]`, ...) are strings that stand for one reserved id each;
`special_tokens` maps the string to its id. `save(path)` writes the tokenizer into a folder (or a
`.json` file) and `load(path)` reads it back identically.

Special tokens are control tokens, so text never makes them by default: `encode(text)` reads
`<|im_end|>` in `text` as the ten characters it is spelled with, exactly as tiktoken's
`encode_ordinary` does. A caller that wrote the text itself opts in, as with tiktoken:
`encode(text, allowed_special="all")` or `allowed_special={"<|endoftext|>"}`. Chat templates and
the CLI insert control tokens by id (tokenizers/chat_template.py), so user text can never close a
turn or open a system one (a prompt injection).

The helpers: `check_ids` (decode's range check), `allowed_specials` (the opt-in, checked),
`split_on_specials` (cut text around the allowed special tokens before the ordinary tokenizer
sees it), `json_path` (folder or file -> tokenizer.json), and `read_layout` and `check_layout`
(load's side of `Tokenizer.save_layout`: the parsed tokenizer.json, or one line saying there is
none or that it is another tokenizer's).
"""
from __future__ import annotations

import json
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Iterable, Union

import regex

from glassformer.errors import GlassformerError
from glassformer.tokenizers.tokenizer_config import TokenizerConfig, write_tokenizer_config

TOKENIZER_JSON = "tokenizer.json"   # the file name Hugging Face and glassformer both use
# `allowed_special`: "all", or the special-token strings that text may spell (default: none).
AllowedSpecial = Union[str, Iterable[str]]


class Tokenizer(ABC):
    """encode/decode between text and ids, plus vocabulary size, special tokens and save/load."""

    # The chat template and named tokens (bos_token, ...) of the files the tokenizer came from
    # (tokenizer_config.py); load_tokenizer sets it, `save` writes it back.
    config: TokenizerConfig = TokenizerConfig()

    @property
    @abstractmethod
    def vocab_size(self) -> int:
        """Number of ids: every id encode returns is in range(vocab_size)."""

    @property
    @abstractmethod
    def special_tokens(self) -> dict[str, int]:
        """Special token string -> its id (a fresh dict; empty when there are none)."""

    @abstractmethod
    def encode(self, text: str, allowed_special: AllowedSpecial = ()) -> list[int]:
        """Text -> ids. Raises GlassformerError for text the vocabulary cannot represent.

        Special-token strings in `text` are plain text unless `allowed_special` names them
        ("all" names every one); see the module docstring.
        """

    @abstractmethod
    def decode(self, ids: Iterable[int]) -> str:
        """Ids -> text. Raises GlassformerError naming the first id outside range(vocab_size)."""

    @abstractmethod
    def id_to_piece(self, token_id: int) -> str:
        """The vocabulary's own spelling of one id (`Ġthe` for GPT-2, `##ing` for BERT)."""

    @abstractmethod
    def save(self, path: str | Path) -> Path:
        """Write the tokenizer under `path` (a folder, or a .json file); returns the main file."""

    @classmethod
    @abstractmethod
    def load(cls, path: str | Path) -> "Tokenizer":
        """Read back what `save` wrote."""

    def save_config(self, folder: str | Path) -> None:
        """Write tokenizer_config.json and chat_template.jinja into `folder`, when there is a
        template or a named token to keep (a chat model's export then still chats)."""
        if not self.config.is_empty():
            write_tokenizer_config(folder, self.config, self.special_tokens)

    def save_layout(self, target: Path, layout: dict) -> Path:
        """Write `layout` as the JSON file `target` (its folder made if needed), then the chat
        template and named tokens beside it (`save_config`); returns target. Every `save` ends
        here, so each tokenizer.json is written the same way (UTF-8, unescaped, indent 1)."""
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(layout, ensure_ascii=False, indent=1), encoding="utf-8")
        self.save_config(target.parent)
        return target


class LayoutTokenizer(Tokenizer):
    """A tokenizer saved as glassformer's own one-file layout, {"type": LAYOUT_TYPE, VOCAB: [...],
    ...} (char, pair): its save, load and from_layout, written once; each says which fields its
    layout holds (`fields`) and how it is built from them (`from_fields`)."""

    KIND: str         # its name in messages: "no char tokenizer at ..."
    LAYOUT_TYPE: str  # the "type" field that marks its tokenizer.json
    VOCAB: str        # the layout's vocabulary list ("chars", "symbols")

    @abstractmethod
    def fields(self) -> dict:
        """The layout's fields besides "type"."""

    @classmethod
    @abstractmethod
    def from_fields(cls, layout: dict) -> "LayoutTokenizer":
        """The tokenizer of a checked layout (its VOCAB is a list)."""

    def save(self, path: str | Path) -> Path:
        """Write `tokenizer.json` into the folder `path` (created if needed), or to `path` if
        .json."""
        return self.save_layout(json_path(path), {"type": self.LAYOUT_TYPE, **self.fields()})

    @classmethod
    def load(cls, path: str | Path) -> "LayoutTokenizer":
        source, layout = read_layout(path, cls.KIND)
        return cls.from_layout(layout, source)

    @classmethod
    def from_layout(cls, layout: dict, source: str | Path = "<dict>") -> "LayoutTokenizer":
        """Build from the parsed JSON layout; `source` only names the file in errors."""
        check_layout(layout, source, cls.KIND, cls.LAYOUT_TYPE, cls.VOCAB)
        return cls.from_fields(layout)


def check_ids(ids: Iterable[int], vocab_size: int) -> list[int]:
    """`ids` as a list of Python ints, or GlassformerError naming the first one out of range.

    note: Python lists accept negative indices, so an unchecked id of -1 would silently decode as
    the last token; decode must reject it instead.
    """
    id_list = [int(token_id) for token_id in ids]
    for position, token_id in enumerate(id_list):
        if not 0 <= token_id < vocab_size:
            raise GlassformerError(
                f"id {token_id} at position {position} is outside the vocabulary "
                f"(valid ids are 0..{vocab_size - 1})")
    return id_list


def allowed_specials(allowed_special: AllowedSpecial, special_tokens: dict[str, int]) -> set[str]:
    """The special-token strings `text` may spell: all of them for "all", else the ones named.

    A name that is not a special token of this tokenizer is an error (a typo would otherwise
    silently leave the token as text).

    >>> sorted(allowed_specials("all", {"<|a|>": 5, "<|b|>": 6}))
    ['<|a|>', '<|b|>']
    """
    if isinstance(allowed_special, str):
        if allowed_special != "all":
            raise GlassformerError(f'allowed_special is "all" or a set of special tokens, '
                                   f"got the string {allowed_special!r}")
        return set(special_tokens)
    allowed = set(allowed_special)
    unknown = sorted(allowed - set(special_tokens))
    if unknown:
        raise GlassformerError(f"allowed_special names {unknown[0]!r}, which is not a special "
                               f"token of this tokenizer (it has {len(special_tokens)})")
    return allowed


def split_on_specials(text: str, special_tokens: Iterable[str]) -> list[tuple[str, bool]]:
    """Cut `text` into (chunk, is_special) pieces, in order, around exact special-token matches.

    Longer specials are tried first, so `<|im_start|>` wins over a hypothetical `<|im`.
    Empty chunks are dropped. With no special tokens the text comes back as one chunk.

    >>> split_on_specials("a<|endoftext|>b", ["<|endoftext|>"])
    [('a', False), ('<|endoftext|>', True), ('b', False)]
    """
    specials = sorted(special_tokens, key=len, reverse=True)
    if not specials:
        return [(text, False)] if text else []
    alternation = "|".join(regex.escape(token) for token in specials)
    # A capturing group makes regex.split keep the separators: even items are plain text,
    # odd items are the special tokens themselves.
    parts = regex.split(f"({alternation})", text)
    return [(part, index % 2 == 1) for index, part in enumerate(parts) if part]


def json_path(path: str | Path) -> Path:
    """`path` itself when it names a .json file, else `path/tokenizer.json` (a folder)."""
    path = Path(path)
    return path if path.suffix == ".json" else path / TOKENIZER_JSON


def read_layout(path: str | Path, kind: str) -> tuple[Path, dict]:
    """(the tokenizer.json `path` names, its parsed layout); GlassformerError "no {kind}
    tokenizer at FILE: file not found" when it is missing."""
    source = json_path(path)
    if not source.is_file():
        raise GlassformerError(f"no {kind} tokenizer at {source}: file not found")
    return source, json.loads(source.read_text(encoding="utf-8"))


def check_layout(layout, source: str | Path, kind: str, layout_type: str, field: str) -> None:
    """Refuse a parsed layout that is not glassformer's own `kind` tokenizer: not a dict whose
    "type" is `layout_type`, or without its vocabulary list `field`. `source` names the file."""
    if not isinstance(layout, dict) or layout.get("type") != layout_type:
        found = layout.get("type") if isinstance(layout, dict) else type(layout).__name__
        raise GlassformerError(f"{source} is not a {kind} tokenizer: expected "
                               f'{{"type": "{layout_type}", ...}}, found type {found!r}')
    if not isinstance(layout.get(field), list):
        raise GlassformerError(f"{source}: {kind} tokenizer layout has no \"{field}\" list")
