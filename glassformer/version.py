"""The package's version: what `glassformer --version` prints.

Installed (pip install, editable or not), the version is the distribution's metadata
(importlib.metadata). Run from a source tree that was never installed (`PYTHONPATH=. python -m
glassformer`), there is no metadata, so it is read from the tree's own pyproject.toml ([project]
version, the one place it is written). "unknown" when neither exists.
"""
from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path

DISTRIBUTION = "glassformer"
# the source tree's pyproject.toml: one folder above the package
PYPROJECT = Path(__file__).resolve().parent.parent / "pyproject.toml"
# `version = "0.1.0"` in the [project] table (before any other table starts)
PROJECT_VERSION = re.compile(r'^\[project\][^\[]*?^version\s*=\s*"([^"]+)"', re.M | re.S)


def package_version() -> str:
    """The installed distribution's version, else the source tree's, else "unknown"."""
    try:
        return metadata.version(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return source_tree_version(PYPROJECT) or "unknown"


def source_tree_version(pyproject: Path) -> str | None:
    """[project] version of a pyproject.toml; None when the file or the key is missing.

    note: a regular expression, not tomllib, which Python 3.10 (still supported) lacks."""
    try:
        text = pyproject.read_text(encoding="utf-8")
    except OSError:
        return None
    found = PROJECT_VERSION.search(text)
    return found.group(1) if found else None
