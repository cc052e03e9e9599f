"""The course: Jupyter notebooks in English (en/) and 中文 (zh/), shipped inside the package.

    en/, zh/           the notebooks, outputs stripped (`glassformer notebooks` copies them out)
    cells.py, source/  what they are written from: prose in both languages, one code
    build.py           `python -m glassformer.notebooks.build` writes en/ and zh/ from source/

Two calls: `find_data(name)`, which a notebook uses to find a corpus beside the repository
(`../shared/data` from its root) from whatever folder it runs in, and `copy_course(lang, out)`,
which `glassformer notebooks` runs.
"""
from __future__ import annotations

import shutil
from pathlib import Path

from glassformer.errors import GlassformerError

HERE = Path(__file__).resolve().parent
LANGS = ("en", "zh")


def course_files(lang: str) -> list[Path]:
    """The notebooks of one language, in course order."""
    if lang not in LANGS:
        raise GlassformerError(f"expected --lang en or zh, got {lang!r}")
    return sorted((HERE / lang).glob("*.ipynb"), key=lambda path: int(path.name.split("_")[0]))


def find_data(name: str, start: str | Path | None = None) -> Path | None:
    """shared/data/<name> in `start` (default: the current folder) or the nearest folder above
    it that has one, as ../shared/data sits beside the repository; None when there is none."""
    here = Path.cwd() if start is None else Path(start)
    for folder in [here, *here.resolve().parents]:
        path = folder / "shared" / "data" / name
        if path.is_file():
            return path
    return None


def copy_course(lang: str, out: str | Path) -> list[Path]:
    """Copy the notebooks of `lang` into the folder `out` (made if absent). An existing notebook
    of the same name is never overwritten: one line names it instead."""
    files = course_files(lang)
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise GlassformerError(f"--out {out} is a file, not a folder")
    clashes = [out / path.name for path in files if (out / path.name).exists()]
    if clashes:
        raise GlassformerError(f"{clashes[0]} already exists: choose another --out, or move it "
                               "away (your own edits may be in it)")
    out.mkdir(parents=True, exist_ok=True)
    return [Path(shutil.copyfile(path, out / path.name)) for path in files]
