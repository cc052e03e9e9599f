"""`session.send()` and the READMEs agree (issue 49): the READMEs' chat lines, run as written on a
tiny chat model, print the reply's text, the same text the conversation keeps; `glassformer
--version` prints the package's version (installed metadata, else the tree's pyproject.toml)."""
import re
import subprocess
import sys
from pathlib import Path

import pytest

from glassformer.cli import main
from glassformer.tasks.chat import ChatSession
from glassformer.version import PYPROJECT, package_version, source_tree_version

from tests.tasks.test_chat_session import FMT, tiny_chat_model

ROOT = Path(__file__).resolve().parents[2]


def readme_chat_lines(readme: str) -> str:
    """The README's Python lines from `session = glassformer.open_chat(...)` to the line before
    `vectors =`, comments and all (they run as written)."""
    text = (ROOT / readme).read_text(encoding="utf-8")
    found = re.search(r"^session = glassformer\.open_chat.*?\n(.*?)^vectors = ", text, re.M | re.S)
    assert found, f"{readme} has no open_chat example"
    return found.group(1)


@pytest.mark.parametrize("readme", ["README.md", "README.zh-CN.md"])
def test_the_readmes_send_example_prints_the_reply(readme):
    session = ChatSession(tiny_chat_model(max_seq_len=256), FMT)
    printed = []
    # the tiny model's tokenizer knows ASCII only; a short greedy reply
    lines, sends = re.subn(r'session\.send\("[^"]*"\)',
                           'session.send("Hi!", max_new_tokens=8, temperature=0.0)',
                           readme_chat_lines(readme))
    assert sends == 1
    exec(lines, {"session": session,
                 "print": lambda text, end="\n", flush=False: printed.append(text + end)})
    reply = session.messages[-1]
    assert reply["role"] == "assistant" and reply["content"]
    assert "".join(printed) == reply["content"]


def test_version_prints_the_package_version(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out == f"glassformer {package_version()}\n"
    assert package_version() == source_tree_version(PYPROJECT)   # the editable install's own


def test_a_source_tree_never_installed_reads_its_pyproject(monkeypatch, tmp_path):
    from importlib import metadata

    def not_installed(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", not_installed)
    assert package_version() == source_tree_version(PYPROJECT) and package_version()
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[build-system]\nrequires = ["x"]\nversion = "9"\n\n[project]\n'
                         'name = "glassformer"\nversion = "1.2.3"\n', encoding="utf-8")
    assert source_tree_version(pyproject) == "1.2.3"
    assert source_tree_version(tmp_path / "missing.toml") is None


def test_python_m_glassformer_version():
    done = subprocess.run([sys.executable, "-m", "glassformer", "--version"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0 and done.stdout == f"glassformer {package_version()}\n"
