"""The viewer's browser tests read pages in the one headless Chromium of tests/conftest.py
(`browser`, shared with tests/serve/ and the course's pages).

`open_page(path)` opens a page from file:// and returns it; `checked(page)` then asserts that
the page fetched nothing but its own file and logged no console error.
"""
from pathlib import Path

import pytest


class Watched:
    """A page and what it did: every URL it requested, every console error."""

    def __init__(self, page, path: Path):
        self.page, self.path = page, path
        self.requests, self.errors = [], []
        page.on("request", lambda request: self.requests.append(request.url))
        page.on("console", lambda msg: self.errors.append(msg.text) if msg.type == "error"
                else None)
        page.on("pageerror", lambda err: self.errors.append(str(err)))

    def checked(self):
        """No request but the page's own file, no console error, the contract in place."""
        assert self.requests == [self.path.as_uri()], self.requests
        assert self.errors == [], self.errors
        assert self.page.evaluate("typeof window.glassformerViewer") == "object"


@pytest.fixture
def open_page(browser):
    contexts = []

    def opener(path: Path) -> Watched:
        context = browser.new_context(viewport={"width": 1200, "height": 900})
        contexts.append(context)
        page = context.new_page()
        watched = Watched(page, Path(path).resolve())
        page.goto(watched.path.as_uri())
        return watched

    yield opener
    for context in contexts:
        context.close()


@pytest.fixture
def drawn():
    """drawn(page, selector): True when the canvas holds more than one colour (a blank canvas
    has one)."""
    return canvas_is_drawn


def canvas_is_drawn(page, selector: str) -> bool:
    return page.evaluate("""(sel) => {
        const c = document.querySelector(sel);
        const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
        const first = d.slice(0, 4).join();
        for (let i = 4; i < d.length; i += 4) {
            if (d.slice(i, i + 4).join() !== first) return true;
        }
        return false;
    }""", selector)
