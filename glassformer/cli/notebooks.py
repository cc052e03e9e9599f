"""`glassformer notebooks`: copy the course's Jupyter notebooks next to you, to open with Jupyter.

    glassformer notebooks                      ./glassformer-course/, in the locale's language
    glassformer notebooks --lang zh --out 课程  the Chinese notebooks into ./课程/

The notebooks ship inside the package (glassformer/notebooks/en, zh); this copies one language.
"""
from __future__ import annotations

import os

from glassformer.cli.common import detect_lang
from glassformer.notebooks import copy_course

NAME = "notebooks"
HELP = "copy the course's Jupyter notebooks (English or 中文) into a folder to open with Jupyter"
DEFAULT_OUT = "glassformer-course"


def add_arguments(parser) -> None:
    parser.add_argument("--lang", choices=["en", "zh"], default=None,
                        help="the notebooks' language (default: from the locale)")
    parser.add_argument("--out", default=DEFAULT_OUT, metavar="DIR",
                        help=f"folder to copy them into, made if absent (default: {DEFAULT_OUT}); "
                             "a notebook already there is never overwritten")


def run(args) -> int:
    lang = args.lang or detect_lang(os.environ)
    copied = copy_course(lang, args.out)
    for path in copied:
        print(path)
    print(f"{len(copied)} notebooks in {args.out}; open them with: jupyter lab {args.out}  "
          "(Jupyter: pip install jupyterlab, with glassformer's notebook extra)")
    return 0
