"""Which kernels run: the NumPy reference or numba's compiled twins.

    GLASSFORMER_KERNELS=numpy   the NumPy path everywhere (the reference; CI runs one job so)
    GLASSFORMER_KERNELS=numba   the compiled kernels; an error when numba cannot be imported
    GLASSFORMER_KERNELS=auto    (or unset) numba when it can be imported, else NumPy, silently

`glassformer --kernels numpy|numba|auto COMMAND ...` sets the same variable for the command (and
for any process it starts). The setting is read where a kernel is about to be needed
(`decode_kernels`), so a test or a notebook may change it between calls.

Numba is optional (the `fast` extra): `import glassformer` never imports it, and nothing here
imports it until a compiled kernel is asked for. Its compiled code is cached on disk
(`cache_dir`: NUMBA_CACHE_DIR when set, else $XDG_CACHE_HOME/glassformer/numba/<sources>, else
~/.cache/glassformer/numba/<sources>), so only the first process on a machine pays the compile.
<sources> is a digest of every kernels/*.py: numba checks only the file of the function it
loads, so a kernel whose helper (another file: int8_dots.py, exp_numba.py) changed would
otherwise load stale machine code.
"""
from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

from glassformer.errors import GlassformerError

KERNELS_ENV = "GLASSFORMER_KERNELS"
CHOICES = ("auto", "numpy", "numba")


def numba_importable() -> bool:
    """Whether numba is installed, found without importing it (looked up once a process: the
    training kernels ask on every op call, and a lookup costs ~20 us)."""
    return _numba_found()


@functools.cache
def _numba_found() -> bool:
    return importlib.util.find_spec("numba") is not None


def kernel_choice(setting: str | None = None) -> str:
    """"numpy" or "numba": what `setting` (default: $GLASSFORMER_KERNELS, "auto" when unset)
    selects on this machine."""
    if setting is None:
        setting = os.environ.get(KERNELS_ENV, "") or "auto"
    setting = setting.strip().lower()
    if setting not in CHOICES:
        raise GlassformerError(f"{KERNELS_ENV}={setting!r} is not a kernel choice; expected one "
                               f"of {', '.join(CHOICES)}")
    if setting == "auto":
        return "numba" if numba_importable() else "numpy"
    if setting == "numba" and not numba_importable():
        raise GlassformerError(f"{KERNELS_ENV}=numba but numba is not installed; install the "
                               f"fast extra (pip install 'glassformer[fast]') or use numpy")
    return setting


def cache_dir() -> Path:
    """Where numba keeps compiled kernels: NUMBA_CACHE_DIR, else the user's cache folder."""
    if os.environ.get("NUMBA_CACHE_DIR"):
        return Path(os.environ["NUMBA_CACHE_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "glassformer" / "numba" / _sources_digest()


@functools.cache
def _sources_digest() -> str:
    """12 hex digits of the kernels package's sources, read once a process."""
    digest = hashlib.sha256()
    for path in sorted(Path(__file__).parent.glob("*.py")):
        digest.update(path.name.encode() + b"\0" + path.read_bytes())
    return digest.hexdigest()[:12]


def _compiled(name: str = "decode_numba") -> ModuleType:
    """kernels/<name>.py, imported (and numba with it) on first use, its cache set first."""
    folder = cache_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise GlassformerError(f"cannot create numba's cache folder {folder} ({err.strerror}); "
                               f"set NUMBA_CACHE_DIR to a writable folder, or "
                               f"{KERNELS_ENV}=numpy") from None
    # note: with highlighting on, numba initialises colorama, which writes an ANSI reset to a
    # terminal stdout at exit; an MPI rank's stdout is a pty, so every data-parallel command
    # (and any test that reads its last line as JSON) would end with "\x1b[0m"
    os.environ.setdefault("NUMBA_DISABLE_ERROR_MESSAGE_HIGHLIGHTING", "1")
    import numba

    if not os.environ.get("NUMBA_CACHE_DIR"):
        # note: set before decode_numba.py's decorators run, which is when numba picks the
        # folder; NUMBA_CACHE_DIR, when set, was already read by numba itself
        numba.config.CACHE_DIR = str(folder)
    if "glassformer.kernels." + name not in sys.modules:
        # numba starts with a thread a core; its threaded products get BLAS's count instead
        # (the CLI sizes it to the idle cores; blas_threads keeps the two together from now on)
        from glassformer.blas import blas_thread_count
        numba.set_num_threads(min(blas_thread_count(), numba.config.NUMBA_NUM_THREADS))
    return importlib.import_module(f"glassformer.kernels.{name}")


def _chosen(name: str, setting: str | None) -> ModuleType | None:
    """kernels/<name>.py when the choice is numba, else None. Asked at every decoded token and
    every product, so an already-loaded module is returned as it is (no mkdir, no import)."""
    if kernel_choice(setting) != "numba":
        return None
    loaded = sys.modules.get("glassformer.kernels." + name)
    return loaded if loaded is not None else _compiled(name)


def decode_kernels(setting: str | None = None) -> ModuleType | None:
    """The compiled decode kernels (decode_numba.py) when the choice is numba, else None: the
    caller then runs its ordinary NumPy path."""
    return _chosen("decode_numba", setting)


def decode_layer_kernel(setting: str | None = None):
    """decode_layer_numba.py's `layer_step` (one decoded row's whole layer in one compiled call,
    its products NumPy's BLAS called from the loop) when the choice is numba and that BLAS can be
    called so (blas_numba.py: FOUND), else None: blocks/decode_step.py then calls layer by
    layer's parts."""
    module = _chosen("decode_layer_numba", setting)
    return module.layer_step if module is not None and module.FOUND else None


def quant_kernels(setting: str | None = None) -> ModuleType | None:
    """The compiled quantized products (quant_numba.py) when the choice is numba, else None: the
    caller (ops/quant/matrix.py, the one place that asks) then runs ops/quant/product.py."""
    return _chosen("quant_numba", setting)


def quant_rows_kernels(setting: str | None = None) -> ModuleType | None:
    """The compiled few-row quantized products (quant_rows_numba.py: 2..16 rows of x, each block
    unpacked once for all of them) when the choice is numba, else None: ops/quant/matrix.py then
    runs ops/quant/product.py, their NumPy reference."""
    return _chosen("quant_rows_numba", setting)


def q8_kernels(setting: str | None = None) -> ModuleType | None:
    """The compiled 8-bit activation products (q8_numba.py) when the choice is numba, else None:
    ops/quant/matrix.py then runs ops/quant/activations_q8.py, their NumPy reference."""
    return _chosen("q8_numba", setting)


def prefill_kernels(setting: str | None = None) -> ModuleType | None:
    """The prefill's fast path (prefill.py: tiled attention, RoPE, SwiGLU on the compiled loops
    of prefill_numba.py) when the choice is numba, else None: blocks/attention.py and
    blocks/mlp.py then run the NumPy twins (ops/)."""
    return _chosen("prefill", setting)


def quant_slab_kernels(setting: str | None = None) -> ModuleType | None:
    """The compiled widening of many-row quantized products (quant_slabs.py) when the choice is
    numba, else None: ops/quant/matrix.py then runs ops/quant/product.py's NumPy widening."""
    return _chosen("quant_slabs", setting)


def train_kernels(setting: str | None = None) -> ModuleType | None:
    """The compiled training kernels (train_numba.py: LayerNorm, the tanh GELU, AdamW) when the
    choice is numba, else None: the caller then runs their NumPy twins (the ops, and
    train/optim.py's adamw_update). Asked once per op call, so it must stay cheap."""
    return _chosen("train_numba", setting)
