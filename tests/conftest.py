"""`browser`: one headless Chromium for every browser test of the session (Debian's
/usr/bin/chromium, driven by Playwright from PyPI; no browser is downloaded; `.ci/setup-system.sh`
installs it). One definition here, not one per folder: Playwright's sync API runs an event loop
of its own, and a second instance started while the first is alive fails to start.

Shared by tests/notebooks/ (what each notebook computes) and tests/viewer/test_course_pages.py
(how it draws in Chromium): the course's notebooks, each executed once per test session on a fresh kernel of this very
Python (an ipykernel `python3` spec written for sys.executable and put first on JUPYTER_PATH, so
a system-wide kernel of another Python is never picked; runs as root too), then rendered to HTML.
The kernels' temporary folders (the notebooks' training runs) live under pytest's tmp_path.

`executed(name, lang)` -> Executed(notebook, results): the notebook with its outputs and the
dict its last cell names RESULTS (read through one extra cell the test appends, then drops).
"""
import json
import sys
from pathlib import Path
from typing import NamedTuple

import pytest

CHROMIUM = Path("/usr/bin/chromium")
COURSE = Path(__file__).resolve().parents[1] / "glassformer" / "notebooks"
CELL_TIMEOUT_S = 300     # the slowest cell: SmolLM2's LoRA step on a loaded machine
MARK = "RESULTS-JSON "


class Executed(NamedTuple):
    notebook: object     # nbformat.NotebookNode, outputs in
    results: dict


@pytest.fixture(scope="session")
def kernel_name(tmp_path_factory):
    """A kernel spec named python3 for this interpreter, first on JUPYTER_PATH."""
    kernelspec = pytest.importorskip("ipykernel.kernelspec")
    pytest.importorskip("nbclient")
    prefix = tmp_path_factory.mktemp("jupyter")
    kernelspec.install(prefix=str(prefix), kernel_name="python3")
    spec = json.loads((prefix / "share/jupyter/kernels/python3/kernel.json").read_text())
    assert spec["argv"][0] == sys.executable
    patch = pytest.MonkeyPatch()
    patch.setenv("JUPYTER_PATH", str(prefix / "share" / "jupyter"))
    patch.setenv("PYDEVD_DISABLE_FILE_VALIDATION", "1")   # debugpy's warning on frozen modules
    # the notebooks' run folders (tempfile.mkdtemp) go under pytest's tmp, which pytest rotates
    patch.setenv("TMPDIR", str(tmp_path_factory.mktemp("kernel-tmp")))
    yield "python3"
    patch.undo()


@pytest.fixture(scope="session")
def executed(kernel_name):
    nbformat = pytest.importorskip("nbformat")
    from nbclient import NotebookClient
    done = {}

    def run(name: str, lang: str) -> Executed:
        if (name, lang) not in done:
            path = COURSE / lang / f"{name}.ipynb"
            notebook = nbformat.read(path, as_version=4)
            notebook.cells.append(nbformat.v4.new_code_cell(
                f"import json; print({MARK!r} + json.dumps(RESULTS, default=float))"))
            NotebookClient(notebook, kernel_name=kernel_name, timeout=CELL_TIMEOUT_S,
                           resources={"metadata": {"path": str(path.parent)}}).execute()
            last = notebook.cells.pop()
            text = "".join(out.get("text", "") for out in last.outputs)
            done[name, lang] = Executed(notebook, json.loads(text.split(MARK, 1)[1]))
        return done[name, lang]

    return run


@pytest.fixture(scope="session")
def browser():
    sync_api = pytest.importorskip("playwright.sync_api")
    if not CHROMIUM.exists():
        pytest.skip("needs Debian's chromium: run .ci/setup-system.sh (apt-get install chromium)")
    with sync_api.sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                                              args=["--no-sandbox"])
        yield chromium
        chromium.close()
