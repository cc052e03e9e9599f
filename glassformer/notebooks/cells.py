"""The cells a course notebook is made of: prose in English and 中文, code shared by both.

    md(en, zh)   a markdown cell: the same explanation, written for each language's readers
    code(text)   a code cell: identical in notebooks/en and notebooks/zh
    setup()      every notebook's first code cell; only its LANG differs between the two
"""
from __future__ import annotations

from typing import NamedTuple

LANGS = ("en", "zh")
SETUP = '''LANG = "{lang}"  # the language of the inline views: "en" or "zh"
import numpy as np
import glassformer
from glassformer.notebooks import find_data
np.set_printoptions(precision=4, suppress=True)'''


class Cell(NamedTuple):
    kind: str            # "markdown" or "code"
    text: dict           # {"en": ..., "zh": ...}


def md(en: str, zh: str) -> Cell:
    return Cell("markdown", {"en": en.strip(), "zh": zh.strip()})


def code(text: str) -> Cell:
    text = text.strip()
    return Cell("code", {"en": text, "zh": text})


def setup() -> Cell:
    return Cell("code", {lang: SETUP.format(lang=lang) for lang in LANGS})
