"""One self-contained HTML file: the page's data as JSON, the CSS and JS inline, nothing fetched.

The page works from file:// with no server and no network: no CDN, no web font, no URL of any
kind (tests/viewer/ fail on any request). static/viewer.css and static/viewer.js are written into
the file; the data sits in a <script type="application/json"> element that the JS parses.
"""
from __future__ import annotations

import html
import json
from pathlib import Path

from glassformer.errors import GlassformerError

STATIC = Path(__file__).resolve().parent / "static"
# The scripts of each page, in order: the model page and the encoder-decoder page.
MODEL_SCRIPTS = ["common.js", "experts.js", "viewer.js"]
SEQ2SEQ_SCRIPTS = ["common.js", "seq2seq.js"]

TEMPLATE = """<!DOCTYPE html>
<html lang="{lang}">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<style>
{css}
</style>
</head>
<body>
<div id="app"></div>
<script type="application/json" id="gf-data">{data}</script>
<script>
{js}
</script>
</body>
</html>
"""


def _script_safe(payload: dict) -> str:
    """JSON that cannot end its <script> element early ('</' is written '<\\/')."""
    text = json.dumps(payload, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    return text.replace("</", "<\\/")


def render_page(payload: dict, *, title: str, lang: str, scripts: list[str]) -> str:
    """The HTML text of a page: `payload` drawn by the named files of static/ (in order)."""
    css = (STATIC / "viewer.css").read_text(encoding="utf-8")
    js = "\n".join((STATIC / name).read_text(encoding="utf-8") for name in scripts)
    return TEMPLATE.format(lang=lang, title=html.escape(title), css=css,
                           data=_script_safe({**payload, "lang": lang}), js=js)


def write_page(path: str | Path, payload: dict, *, title: str, lang: str,
               scripts: list[str]) -> Path:
    """Write the page to `path` (its folder must exist); returns the path."""
    path = Path(path)
    if not path.parent.is_dir():
        raise GlassformerError(f"cannot write {path}: the folder {path.parent} does not exist")
    path.write_text(render_page(payload, title=title, lang=lang, scripts=scripts),
                    encoding="utf-8")
    return path
