"""`--html PAGE` and `--lang` for the interpretability commands (patch, attribute, heads, sae
features): the page viewer/interp_page.py writes, checked before any model is loaded."""
from __future__ import annotations

import os
import sys
from pathlib import Path

from glassformer.display import detect_lang
from glassformer.errors import GlassformerError
from glassformer.viewer.interp_page import write_interp_page


def add_html_arguments(parser, what: str) -> None:
    parser.add_argument("--html", default=None, metavar="PAGE",
                        help=f"also write {what} as one offline HTML page (docs/viewer.md)")
    parser.add_argument("--lang", choices=["en", "zh"], default=None,
                        help="the page's language (default: the locale's)")


def check_html(args) -> None:
    """One line, before any work, when the page's folder does not exist."""
    if args.html is not None and not Path(args.html).resolve().parent.is_dir():
        raise GlassformerError(f"cannot write {args.html}: its folder does not exist")


def write_html(args, data: dict) -> None:
    """Write the page when --html was given, and say so on stderr (stdout stays the table, or
    the JSON of --json)."""
    if args.html is None:
        return
    write_interp_page(args.html, data, lang=args.lang or detect_lang(os.environ))
    print(f"wrote {args.html}", file=sys.stderr)
