"""`load_tokenizer(path)`: recognise a tokenizer's file layout and build the matching tokenizer.

    folder with tokenizer.json         HF (BPE or WordPiece model) or glassformer's {"type": "char"}
                                       or {"type": "pairs"} (tokenizers/pairs.py)
    folder with vocab.json+merges.txt  GPT-2 style byte-level BPE (also encoder.json + vocab.bpe)
    folder with vocab.txt              BERT WordPiece
    file *.tiktoken                    tiktoken ranks (pattern and special tokens given by caller)
    file *.gguf                        byte-level BPE from the GGUF's tokenizer.ggml.* metadata
    a file inside such a folder        the same as its folder, for the files above
    gpt2 / minilm / smollm2            the files installed by the test-extra packages (packaged.py)

An unrecognised layout is an error that lists what was looked for and what was found.
A folder's chat template and named tokens (tokenizer_config.json, chat_template.jinja) come with
the tokenizer as `tokenizer.config` (tokenizer_config.py); a GGUF file's come from its metadata.
"""
from __future__ import annotations

import json
from pathlib import Path

from glassformer.errors import GlassformerError
from glassformer.packaged import TOKENIZER, resolve_path
from glassformer.tokenizers import bpe_files, hf_json
from glassformer.tokenizers.base import TOKENIZER_JSON, Tokenizer
from glassformer.tokenizers.bpe import BPETokenizer
from glassformer.tokenizers.char import CharTokenizer
from glassformer.tokenizers.pairs import PairTokenizer
from glassformer.tokenizers.pretokenize import PreTokenizer
from glassformer.tokenizers.tokenizer_config import read_tokenizer_config
from glassformer.tokenizers.wordpiece import WordPieceTokenizer

# (vocab file, merges file) pairs that make a byte-level BPE folder, in the order tried.
BPE_FILE_PAIRS = (("vocab.json", "merges.txt"), ("encoder.json", "vocab.bpe"))


def load_tokenizer(path: str | Path, *, pattern: str | None = None,
                   special_tokens: dict[str, int] | None = None) -> Tokenizer:
    """The tokenizer stored at `path` (see the module docstring for the layouts recognised).

    pattern: override a byte-level BPE's pre-tokenizer ('gpt2', 'llama3', 'smollm'); a .tiktoken
    file stores none and defaults to 'gpt2'. special_tokens: for .tiktoken files, which store none.
    """
    path = resolve_path(path, TOKENIZER)
    if path.suffix == ".tiktoken":
        return bpe_files.load_tiktoken_file(path, pattern or "gpt2", special_tokens)
    if path.suffix == ".gguf":
        return bpe_files.load_gguf(path, pattern)
    if path.is_dir():
        tokenizer = load_folder(path, pattern)
    elif path.suffix == ".json" and path.name not in ("vocab.json", "encoder.json"):
        tokenizer = load_tokenizer_json(path, pattern)
    elif path.name in ("vocab.json", "merges.txt", "encoder.json", "vocab.bpe", "vocab.txt"):
        tokenizer = load_folder(path.parent, pattern)
    else:
        raise GlassformerError(f"unknown tokenizer file {path}: expected a folder, tokenizer.json, "
                           "vocab.json/merges.txt, vocab.txt, a .tiktoken or a .gguf file")
    tokenizer.config = read_tokenizer_config(path if path.is_dir() else path.parent)
    return tokenizer


def load_folder(folder: Path, pattern: str | None) -> Tokenizer:
    """A folder: tokenizer.json first, then a BPE vocab + merges pair, then vocab.txt."""
    if (folder / TOKENIZER_JSON).is_file():
        return load_tokenizer_json(folder / TOKENIZER_JSON, pattern)
    for vocab_name, merges_name in BPE_FILE_PAIRS:
        if (folder / vocab_name).is_file() or (folder / merges_name).is_file():
            if not (folder / merges_name).is_file():
                raise GlassformerError(f"{folder} has {vocab_name} but is missing its merges file "
                                       f"{merges_name}")
            if not (folder / vocab_name).is_file():
                raise GlassformerError(f"{folder} has {merges_name} but no {vocab_name}")
            return BPETokenizer.from_vocab_files(folder / vocab_name, folder / merges_name,
                                                 pattern or "gpt2")
    if (folder / "vocab.txt").is_file():
        return WordPieceTokenizer.from_vocab_txt(folder / "vocab.txt")
    found = sorted(child.name for child in folder.iterdir())[:12]
    raise GlassformerError(f"unknown tokenizer layout in {folder}: expected tokenizer.json, "
                           f"vocab.json + merges.txt, or vocab.txt; found {found}")


def load_tokenizer_json(path: Path, pattern: str | None) -> Tokenizer:
    """A tokenizer.json: glassformer's char layout, or an HF layout with a BPE/WordPiece model."""
    try:
        layout = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise GlassformerError(f"{path} is not valid JSON: {err}") from None
    if not isinstance(layout, dict):
        raise GlassformerError(f"{path} does not hold a JSON object")
    if layout.get("type") == "char":
        return CharTokenizer.from_layout(layout, path)
    if layout.get("type") == "pairs":  # a seq2seq run's source + target vocabulary
        return PairTokenizer.from_layout(layout, path)
    model_type = (layout.get("model") or {}).get("type")
    if model_type == "BPE":
        tokenizer = BPETokenizer.from_hf_layout(layout, str(path))
        if pattern is not None:
            tokenizer.pretokenizer = PreTokenizer.named(pattern)
        return tokenizer
    if model_type == "WordPiece":
        return WordPieceTokenizer(**hf_json.read_wordpiece_model(layout, str(path)))
    raise GlassformerError(f"{path}: unsupported tokenizer model type {model_type!r} "
                           "(supported: BPE, WordPiece, or glassformer's char layout)")
