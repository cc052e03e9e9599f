"""kernels/choice.py: GLASSFORMER_KERNELS selects the path, numba stays optional and lazy, and
compiled kernels are cached under the user's cache folder."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import glassformer.kernels.choice as choice
from glassformer.errors import GlassformerError
from glassformer.kernels.choice import KERNELS_ENV, cache_dir, decode_kernels, kernel_choice


def test_numpy_is_always_there(monkeypatch):
    monkeypatch.setenv(KERNELS_ENV, "numpy")
    assert kernel_choice() == "numpy"
    assert decode_kernels() is None


@pytest.mark.parametrize("setting", ["", "auto", " Auto "])
def test_auto_is_numba_when_importable(monkeypatch, setting):
    monkeypatch.setenv(KERNELS_ENV, setting)
    monkeypatch.setattr(choice, "numba_importable", lambda: True)
    assert kernel_choice() == "numba"
    monkeypatch.setattr(choice, "numba_importable", lambda: False)
    assert kernel_choice() == "numpy"          # silently: no warning, no error


def test_asking_for_numba_without_it_is_one_clear_error(monkeypatch):
    monkeypatch.setattr(choice, "numba_importable", lambda: False)
    with pytest.raises(GlassformerError, match="numba is not installed.*fast extra"):
        kernel_choice("numba")


def test_a_bad_setting_names_the_choices(monkeypatch):
    monkeypatch.setenv(KERNELS_ENV, "cuda")
    with pytest.raises(GlassformerError, match="GLASSFORMER_KERNELS='cuda'.*auto, numpy, numba"):
        kernel_choice()


def test_cache_dir_follows_numba_then_xdg(monkeypatch, tmp_path):
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "mine"))
    assert cache_dir() == tmp_path / "mine"
    monkeypatch.delenv("NUMBA_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    folder = cache_dir()
    assert folder.parent == tmp_path / "glassformer" / "numba"
    assert len(folder.name) == 12                # a digest of the kernels' sources


def test_the_cache_folder_changes_with_any_kernel_source(monkeypatch, tmp_path):
    """numba checks only the file of the function it loads; a changed helper file elsewhere in
    kernels/ must not load the old machine code, so the folder names the sources."""
    import glassformer.kernels.choice as choice

    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    before = cache_dir()
    fake = tmp_path / "kernels"
    fake.mkdir()
    for path in Path(choice.__file__).parent.glob("*.py"):
        (fake / path.name).write_bytes(path.read_bytes())
    monkeypatch.setattr(choice, "__file__", str(fake / "choice.py"))
    choice._sources_digest.cache_clear()
    try:
        assert cache_dir() == before                       # the same sources, the same folder
        (fake / "int8_dots.py").write_bytes((fake / "int8_dots.py").read_bytes() + b"\n# edit\n")
        choice._sources_digest.cache_clear()
        assert cache_dir() != before
    finally:
        choice._sources_digest.cache_clear()


def run_python(code: str, **env) -> str:
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, **env}, check=True)
    return done.stdout.strip()


def test_import_glassformer_and_a_numpy_decode_never_import_numba():
    code = ("import sys, numpy as np\n"
            "import glassformer\n"
            "from glassformer.models import llama\n"
            "from glassformer.models.model import Model\n"
            "from glassformer.generate.generate import generate\n"
            "cfg = llama.LlamaConfig(vocab_size=20, n_layer=1, n_head=2, d_model=8)\n"
            "m = Model(cfg, llama.init_params(cfg, np.random.default_rng(0)))\n"
            "list(generate(m, np.array([[1, 2]]), max_new_tokens=3, temperature=0.0))\n"
            "print('numba' in sys.modules)")
    assert run_python(code, **{KERNELS_ENV: "numpy"}) == "False"


def test_without_numba_auto_decodes_on_numpy_without_a_warning():
    """numba hidden (find_spec finds nothing, as on a default install): auto decodes on the
    NumPy path, and no warning is printed (-W error would turn one into a failure)."""
    code = ("import importlib.util as util, sys, numpy as np\n"
            "real = util.find_spec\n"
            "util.find_spec = lambda name, *a: None if name == 'numba' else real(name, *a)\n"
            "from glassformer.models import llama\n"
            "from glassformer.models.model import Model\n"
            "from glassformer.generate.generate import generate\n"
            "cfg = llama.LlamaConfig(vocab_size=20, n_layer=1, n_head=2, d_model=8)\n"
            "m = Model(cfg, llama.init_params(cfg, np.random.default_rng(0)))\n"
            "list(generate(m, np.array([[1, 2]]), max_new_tokens=3, temperature=0.0))\n"
            "print('numba' in sys.modules)")
    done = subprocess.run([sys.executable, "-W", "error", "-c", code], capture_output=True,
                          text=True, env={**os.environ, KERNELS_ENV: "auto"})
    assert done.returncode == 0 and done.stdout.strip() == "False", done.stderr
    assert done.stderr == ""


def test_an_unwritable_cache_folder_is_one_clear_error(monkeypatch, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(blocker / "numba"))
    with pytest.raises(GlassformerError, match="cannot create numba's cache folder"):
        choice._compiled()


def test_the_cli_flag_sets_the_choice(monkeypatch, capsys):
    from glassformer.cli import main
    monkeypatch.setenv(KERNELS_ENV, "auto")       # restored after the test
    assert main(["--kernels", "numpy", "gradcheck", "swiglu"]) == 0
    assert os.environ[KERNELS_ENV] == "numpy"


def test_the_cli_refuses_numba_it_does_not_have(monkeypatch, capsys):
    from glassformer.cli import main
    monkeypatch.setattr(choice, "numba_importable", lambda: False)
    monkeypatch.setenv(KERNELS_ENV, "numba")
    assert main(["gradcheck", "swiglu"]) == 2
    assert "numba is not installed" in capsys.readouterr().err
