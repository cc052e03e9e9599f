"""Reading byte-level BPE vocabularies from .tiktoken and GGUF files.

(tokenizer.json and GPT-2's vocab.json + merges.txt are read by BPETokenizer itself, in bpe.py.)

    name.tiktoken             tiktoken: one "base64(token bytes) rank" a line, rank = id, and no
                              merges; a pair merges when the joined bytes are a token, lowest
                              rank first, so we list every such split as a merge, in rank order
    model.gguf                llama.cpp: tokenizer.ggml.tokens / .merges / .token_type metadata

Which tokens are special: in GGUF, those typed CONTROL (3) or USER_DEFINED (4); a .tiktoken file
marks none, so the caller names them. A GGUF file also stores the chat template
(tokenizer.chat_template) and the named tokens by id (tokenizer.ggml.bos_token_id, ...), which
become `tokenizer.config` (tokenizer_config.py).
"""
from __future__ import annotations

import base64
from pathlib import Path
from typing import NamedTuple

from glassformer.errors import GlassformerError
from glassformer.tokenizers.bpe import BPETokenizer
from glassformer.tokenizers.gguf_check import check_gguf
from glassformer.tokenizers.gguf_reader import open_reader
from glassformer.tokenizers.pretokenize import PreTokenizer
from glassformer.tokenizers.tokenizer_config import TokenizerConfig

# GGUF token types (llama.cpp's llama_token_type) that are matched whole in the text.
GGUF_CONTROL, GGUF_USER_DEFINED = 3, 4
# tokenizer.ggml.pre values -> our pre-tokenizer names
GGUF_PRE = {"default": "gpt2", "gpt2": "gpt2", "smollm": "smollm", "llama3": "llama3",
            "llama-v3": "llama3", "llama-bpe": "llama3"}
# tokenizer.ggml.<key>_token_id -> the named token a chat template reads (gguf spells "seperator")
GGUF_NAMED = {"bos": "bos_token", "eos": "eos_token", "unknown": "unk_token",
              "seperator": "sep_token", "padding": "pad_token"}


def merges_from_ranks(ranks: dict[bytes, int]) -> list[tuple[bytes, bytes]]:
    """Every split of every token into two tokens, ordered by the whole token's rank.

    tiktoken merges an adjacent pair whenever the joined bytes have a rank, lowest rank first;
    listing each split (left, right) of a token at that token's rank gives the same choices.
    """
    merges = []
    for token in sorted(ranks, key=ranks.__getitem__):
        for cut in range(1, len(token)):
            if token[:cut] in ranks and token[cut:] in ranks:
                merges.append((token[:cut], token[cut:]))
    return merges


def load_tiktoken_file(path: Path, pretokenizer: str = "gpt2",
                       special_tokens: dict[str, int] | None = None) -> BPETokenizer:
    """A .tiktoken file; it stores no pattern and no special tokens, so the caller names them."""
    ranks: dict[bytes, int] = {}
    for number, line in enumerate(path.read_text(encoding="ascii").splitlines(), start=1):
        if not line:
            continue
        parts = line.split()
        try:
            ranks[base64.b64decode(parts[0], validate=True)] = int(parts[1])
        except (IndexError, ValueError):
            raise GlassformerError(f"{path}:{number}: expected 'base64 rank', got {line[:60]!r}") from None
    if not ranks:
        raise GlassformerError(f"{path} holds no tokens")
    return BPETokenizer(ranks, merges_from_ranks(ranks), pretokenizer=pretokenizer,
                        special_tokens=special_tokens)


def gguf_field(reader, key: str, path: Path):
    """One metadata value (a str, a number or a list), or GlassformerError naming the key."""
    field = reader.fields.get(key)
    if field is None:
        raise GlassformerError(f"{path} has no {key} metadata")
    return field.contents()


def load_gguf(path: Path, pretokenizer: str | None = None) -> BPETokenizer:
    """The byte-level BPE embedded in a GGUF file's tokenizer.ggml.* metadata."""
    check_gguf(path)  # a truncated or corrupt file, named as such, before gguf maps it
    try:
        reader = open_reader(path)   # gguf's reader, its arrays read whole
    except (ValueError, OSError, IndexError, KeyError) as err:
        raise GlassformerError(f"{path} is a corrupt GGUF file: {err}") from None
    return gguf_tokenizer(reader, path, pretokenizer)


class GGUFTokenizerParts(NamedTuple):
    """What a GGUF file's tokenizer is built from, as plain Python lists and strings."""
    tokens: list[str]                 # spelled tokens, by id
    types: list[int]                  # llama_token_type of each token
    merges: list[tuple[str, str]]     # spelled merge pairs, by rank
    pretokenizer: str                 # our pre-tokenizer's name
    config: TokenizerConfig           # chat template and named tokens


def gguf_tokenizer(reader, path: Path, pretokenizer: str | None = None) -> BPETokenizer:
    """load_gguf's tokenizer from a GGUF file already open (a gguf.GGUFReader): loading a model
    reads the file once for its weights and its tokenizer (the reader parses every metadata
    array, ~100k tokens and merges, when it opens the file)."""
    return tokenizer_from_parts(gguf_tokenizer_parts(reader, path, pretokenizer), path)


def gguf_tokenizer_parts(reader, path: Path,
                         pretokenizer: str | None = None) -> GGUFTokenizerParts:
    """The tokenizer's metadata of an open GGUF file, copied out of the reader.

    note: split from building (tokenizer_from_parts) so that io/gguf.py can drop the reader's
    ~500k small NumPy views before the tokenizer's tables are made: built while the reader
    lives, the tables' objects sit among the reader's in the allocator's arenas and keep them
    resident after it is gone (~20 MiB for SmolLM2; docs/performance.md)."""
    model = gguf_field(reader, "tokenizer.ggml.model", path)
    if model != "gpt2":
        raise GlassformerError(f"{path}: tokenizer.ggml.model is {model!r}; only byte-level BPE "
                               "('gpt2') GGUF tokenizers are supported")
    if "tokenizer.ggml.merges" not in reader.fields:
        raise GlassformerError(f"{path}: byte-level BPE tokenizer has no tokenizer.ggml.merges")
    pre = str(gguf_field(reader, "tokenizer.ggml.pre", path)) if pretokenizer is None else None
    if pretokenizer is None and pre not in GGUF_PRE:
        raise GlassformerError(f"{path}: unknown tokenizer.ggml.pre {pre!r}; "
                               f"known: {', '.join(GGUF_PRE)}")
    tokens = gguf_field(reader, "tokenizer.ggml.tokens", path)
    types = (gguf_field(reader, "tokenizer.ggml.token_type", path)
             if "tokenizer.ggml.token_type" in reader.fields else [1] * len(tokens))
    merges = []
    for rank, line in enumerate(gguf_field(reader, "tokenizer.ggml.merges", path)):
        pair = line.split(" ")
        if len(pair) != 2:
            raise GlassformerError(f"{path}: merge {rank} {line!r} is not two tokens and a space")
        merges.append((pair[0], pair[1]))
    return GGUFTokenizerParts(tokens, types, merges, pretokenizer or GGUF_PRE[pre],
                              gguf_tokenizer_config(reader, tokens))


def tokenizer_from_parts(parts: GGUFTokenizerParts, path: Path) -> BPETokenizer:
    """The byte-level BPE of gguf_tokenizer_parts' lists."""
    vocab = {token: token_id for token_id, token in enumerate(parts.tokens)}
    specials = {token: token_id for token_id, (token, kind)
                in enumerate(zip(parts.tokens, parts.types))
                if kind in (GGUF_CONTROL, GGUF_USER_DEFINED)}
    chosen = PreTokenizer.named(parts.pretokenizer)
    tokenizer = BPETokenizer.from_spelled(vocab, parts.merges, chosen, specials, source=str(path))
    tokenizer.config = parts.config
    return tokenizer


def gguf_tokenizer_config(reader, tokens: list[str]) -> TokenizerConfig:
    """The chat template and named tokens (bos_token, ...) of a GGUF file's metadata."""
    template = reader.fields.get("tokenizer.chat_template")
    named = {}
    for key, name in GGUF_NAMED.items():
        field = reader.fields.get(f"tokenizer.ggml.{key}_token_id")
        if field is not None and 0 <= int(field.contents()) < len(tokens):
            named[name] = tokens[int(field.contents())]
    return TokenizerConfig(None if template is None else str(template.contents()) or None, named)
