"""The course's files: built from their sources (en and zh share every code cell), committed
with no outputs, copied out by `glassformer notebooks`, finding their data from any folder."""
import json

import pytest

from glassformer.cli import main
from glassformer.errors import GlassformerError
from glassformer.notebooks import HERE, copy_course, course_files, find_data
from glassformer.notebooks.build import render
from glassformer.notebooks.source import NOTEBOOKS

NAMES = list(NOTEBOOKS)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_committed_notebooks_are_built_and_hold_no_outputs(lang):
    for name, cells in NOTEBOOKS.items():
        path = HERE / lang / f"{name}.ipynb"
        notebook = json.loads(path.read_text(encoding="utf-8"))
        for cell in notebook["cells"]:
            if cell["cell_type"] == "code":
                assert cell["outputs"] == [] and cell["execution_count"] is None, \
                    f"{path} has outputs: clear them (python -m glassformer.notebooks.build)"
        assert path.read_text(encoding="utf-8") == render(cells, lang), \
            f"{path} differs from its source: run python -m glassformer.notebooks.build"
    assert [p.stem for p in course_files(lang)] == NAMES


def test_english_and_chinese_share_their_code_and_not_their_prose():
    for name in NAMES:
        en, zh = (json.loads((HERE / lang / f"{name}.ipynb").read_text(encoding="utf-8"))
                  for lang in ("en", "zh"))
        pairs = list(zip(en["cells"], zh["cells"]))
        assert len(en["cells"]) == len(zh["cells"])
        for number, (a, b) in enumerate(pairs):
            if a["cell_type"] == "code" and number != 1:   # cell 1 sets LANG
                assert a["source"] == b["source"]
            if a["cell_type"] == "markdown":
                assert a["source"] != b["source"]
                assert any("\u4e00" <= ch <= "\u9fff" for ch in "".join(b["source"]))
        assert "".join(zh["cells"][1]["source"]).startswith('LANG = "zh"')


def test_find_data_walks_up_to_shared_data(tmp_path):
    (tmp_path / "shared" / "data").mkdir(parents=True)
    (tmp_path / "shared" / "data" / "corpus.txt").write_text("hi")
    deep = tmp_path / "repo" / "notebooks" / "en"
    deep.mkdir(parents=True)
    assert find_data("corpus.txt", deep) == tmp_path / "shared" / "data" / "corpus.txt"
    assert find_data("absent.txt", deep) is None


def test_notebooks_command_copies_the_course(tmp_path, capsys):
    assert main(["notebooks", "--lang", "zh", "--out", str(tmp_path / "course")]) == 0
    copied = sorted(p.name for p in (tmp_path / "course").iterdir())
    assert copied == sorted(f"{name}.ipynb" for name in NAMES)   # by name: 10_ before 1_
    out = capsys.readouterr().out
    assert "jupyter lab" in out and str(tmp_path / "course") in out
    assert main(["notebooks", "--lang", "en", "--out", str(tmp_path / "course")]) == 2
    assert "already exists" in capsys.readouterr().err      # never over a learner's own edits
    assert main(["notebooks", "--lang", "en", "--out", str(tmp_path / "en")]) == 0


def test_copy_refuses_a_file_and_an_unknown_language(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(GlassformerError, match="is a file, not a folder"):
        copy_course("en", tmp_path / "file")
    with pytest.raises(GlassformerError, match="expected --lang en or zh, got 'fr'"):
        copy_course("fr", tmp_path)


def test_course_files_are_in_chapter_order():
    from glassformer.notebooks import course_files
    numbers = [int(path.name.split("_")[0]) for path in course_files("en")]
    assert numbers == list(range(1, len(NAMES) + 1))      # 10 after 9, not after 1
