"""Inline views in Chromium, as a notebook page holds them: two inspections and an explain trace,
their `_repr_html_` one after another in one page, all draw, stay independent (each its own
frame, its own ids and globals) and fetch nothing."""
import numpy as np

import glassformer
from glassformer.models.gpt2 import GPT2Config, init_params
from glassformer.models.model import Model
from glassformer.tokenizers.char import CharTokenizer

TEXTS = ("to be or not", "水很清")
V = "window.glassformerViewer"
PAGE_ATOL = 5e-3      # uint8 per row: off by at most max/510 < 2e-3


def tiny_model():
    tokenizer = CharTokenizer(sorted(set("".join(TEXTS))))
    cfg = GPT2Config(vocab_size=tokenizer.vocab_size, n_layer=2, n_head=2, d_model=16,
                     max_seq_len=32)
    return Model(cfg, init_params(cfg, np.random.default_rng(0)), tokenizer)


def test_two_inspections_and_a_trace_on_one_page(tmp_path, open_page, drawn):
    model = tiny_model()
    seen = [glassformer.inspect(model, text) for text in TEXTS]
    outputs = [s.view(lang="en")._repr_html_() for s in seen]
    outputs.append(glassformer.trace("attention").view(lang="zh")._repr_html_())
    outputs.append(glassformer.tokenize(model, TEXTS[1]).view(lang="en")._repr_html_())
    path = tmp_path / "notebook.html"
    path.write_text("<!DOCTYPE html><html><head><meta charset='utf-8'></head><body>"
                    + "".join(f"<div class='output'>{out}</div>" for out in outputs)
                    + "</body></html>", encoding="utf-8")
    watched = open_page(path)
    page = watched.page
    page.wait_for_function("""() => Array.from(document.querySelectorAll('iframe')).every(
        f => f.contentWindow && f.contentWindow.glassformerViewer)""")
    frames = [element.content_frame() for element in page.query_selector_all("iframe")]
    ids = page.evaluate("Array.from(document.querySelectorAll('.glassformer-view')).map(e => e.id)")
    assert len(frames) == 3 and len(set(ids)) == 4
    heights = [element.bounding_box()["height"] for element in page.query_selector_all("iframe")]
    assert all(300 < height <= 902 for height in heights), heights   # grown, up to the cap
    first, second, trace = frames
    for frame, text, inspection in zip((first, second), TEXTS, seen):
        assert frame.evaluate(f"{V}.tokens().map(t => t.text).join('')") == text
        shown = np.array(frame.evaluate(f"{V}.attention(1, 1)"))
        assert np.abs(shown - inspection.attentions[1][0, 1]).max() <= PAGE_ATOL
        assert drawn(frame, "#head-canvas")
    assert trace.evaluate(f"{V}.kind") == "trace" and trace.evaluate(f"{V}.lang()") == "zh"
    assert drawn(trace, "#weights-attention")
    first.click("#lang-zh")
    assert first.evaluate(f"{V}.lang()") == "zh" and second.evaluate(f"{V}.lang()") == "en"
    assert second.inner_text("h2") != first.inner_text("h2")
    assert page.evaluate("typeof window.GF + typeof window.glassformerViewer") == \
        "undefinedundefined"
    assert page.query_selector_all("div.glassformer-view .gf-token")
    assert watched.requests == [watched.path.as_uri()], watched.requests
    assert watched.errors == [], watched.errors
