"""The package top (glassformer/__init__.py): every exported name resolves, and `import
glassformer` alone loads none of them, so neither the viewer nor matplotlib, jinja2 or mpi4py."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

import glassformer

ROOT = Path(__file__).resolve().parents[1]
# the one-line check a user can paste, word for word
CHECK = ("import glassformer, sys; print([m for m in ('glassformer.viewer', 'matplotlib', "
         "'jinja2', 'mpi4py') if m in sys.modules])")


def test_import_glassformer_loads_no_heavy_module():
    path = [str(ROOT), os.environ.get("PYTHONPATH", "")]      # this checkout's glassformer first
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, path)))
    done = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize("name", glassformer.__all__)
def test_every_exported_name_resolves(name):
    value = getattr(glassformer, name)
    assert callable(value) and value.__name__ == name
    assert name in dir(glassformer)


def test_the_exports_cover_both_directions_of_io_and_every_task():
    assert {"load_pretrained", "save_pretrained", "load_tokenizer", "translate", "fill_mask",
            "embed", "inspect", "render_chat", "open_chat", "perplexity"} <= set(glassformer.__all__)
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        glassformer.nothing_here
