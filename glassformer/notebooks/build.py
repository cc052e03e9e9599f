"""Write the course's notebooks, en/ and zh/, from their sources (notebooks/source/).

    python -m glassformer.notebooks.build        # rewrites en/*.ipynb and zh/*.ipynb

Each source is a list of cells (notebooks/cells.py): `md(en, zh)`, the prose in both languages,
and `code(text)`, the same code in both. The builder writes nbformat 4.5 JSON with no outputs
and no execution counts (outputs stay out of git; tests/notebooks/ checks that the files equal
what this writes).
"""
from __future__ import annotations

import json
from pathlib import Path

from glassformer.notebooks.cells import LANGS, Cell
from glassformer.notebooks.source import NOTEBOOKS

HERE = Path(__file__).resolve().parent
KERNEL = {"kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
          "language_info": {"name": "python"}}


def notebook_json(cells: list[Cell], lang: str) -> dict:
    """One notebook, outputs stripped: what `jupyter nbconvert --clear-output` leaves."""
    out = []
    for number, cell in enumerate(cells):
        lines = cell.text[lang].splitlines(keepends=True)
        entry = {"cell_type": cell.kind, "id": f"cell-{number:02d}", "metadata": {},
                 "source": lines}
        if cell.kind == "code":
            entry.update({"execution_count": None, "outputs": []})
        out.append(entry)
    return {"cells": out, "metadata": KERNEL, "nbformat": 4, "nbformat_minor": 5}


def render(cells: list[Cell], lang: str) -> str:
    return json.dumps(notebook_json(cells, lang), ensure_ascii=False, indent=1) + "\n"


def build(folder: Path = HERE) -> list[Path]:
    """Write every notebook in both languages under `folder`; returns the paths written."""
    written = []
    for name, cells in NOTEBOOKS.items():
        for lang in LANGS:
            path = folder / lang / f"{name}.ipynb"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(render(cells, lang), encoding="utf-8")
            written.append(path)
    return written


if __name__ == "__main__":
    for path in build():
        print(path)
