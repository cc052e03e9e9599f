"""Pages of the real named models in Chromium: SmolLM2 (GGUF, grouped KV heads) on a prompt that
mixes English and Chinese, and MiniLM (a bidirectional BERT encoder). The page's attention equals
transformers' output_attentions within the page's uint8 quantization; groups join back to the
prompt with no U+FFFD; the logit lens ends at the model's own next token. Slow: each model takes
seconds to load, in each library."""
import numpy as np
import pytest

from glassformer.errors import GlassformerError
from glassformer.io.pretrained import load_pretrained
from glassformer.packaged import MODEL, packaged_path
from glassformer.viewer import inspect
from glassformer.viewer.show import show

pytestmark = pytest.mark.slow

# Same float32 weights, different summation order over 30 layers: weights agree to ~1e-5.
INSPECT_ATOL = 1e-4
PAGE_ATOL = 5e-3     # the bar: uint8 per row is off by at most max/510 < 2e-3
PROMPT = "The capital of France is Paris. 法国的首都是巴黎，水很清。"
MINILM_TEXT = "The river is clear. 水很清。"
CHECKED = ((0, 0), (14, 4), (29, 8))   # (layer, head) pairs read back from the SmolLM2 page


def named_or_skip(name):
    try:
        return packaged_path(name, MODEL)
    except GlassformerError as err:
        pytest.skip(str(err))


def reference_attentions(load, ids):
    torch = pytest.importorskip("torch")
    with torch.no_grad():
        out = load()(torch.tensor([ids]), output_attentions=True)
    return [layer.numpy() for layer in out.attentions]


def test_smollm2_page_in_chromium(tmp_path, open_page, drawn):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate", reason="transformers' GGUF loading needs accelerate")
    path = named_or_skip("smollm2")
    model = load_pretrained(path)
    ids = model.tokenizer.encode(PROMPT)
    theirs = reference_attentions(lambda: transformers.AutoModelForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, dtype=torch.float32,
        attn_implementation="eager").eval(), ids)
    seen = inspect(model, PROMPT)
    for ours, ref in zip(seen.attentions, theirs):
        assert np.abs(ours - ref).max() <= INSPECT_ATOL
    page_path = show(model, PROMPT, tmp_path / "smollm2.html", name="smollm2")
    watched = open_page(page_path)
    page = watched.page
    decoded = page.evaluate("window.glassformerViewer.decodedLayers()")
    assert 0 in decoded and len(decoded) < 30                  # layers decode when first drawn
    for layer, head in CHECKED:
        shown = np.array(page.evaluate(f"window.glassformerViewer.attention({layer}, {head})"))
        assert np.abs(shown - theirs[layer][0, head]).max() <= PAGE_ATOL
    groups = page.evaluate("window.glassformerViewer.groups()")
    joined = "".join(group["text"] for group in groups)
    assert joined == PROMPT and "\ufffd" not in joined
    assert any(len(group["tokens"]) > 1 for group in groups)     # a character cut into bytes
    tokens = page.evaluate("window.glassformerViewer.tokens()")
    assert "⟨" in "".join(token["text"] for token in tokens) and len(tokens) == len(ids)
    top = page.evaluate(f"window.glassformerViewer.logitLens(29, {len(ids) - 1})")
    assert top[0]["id"] == int(seen.out[0, -1].argmax())
    assert 27 not in page.evaluate("window.glassformerViewer.decodedLayers()")
    thumbnail = "#model-grid canvas[data-layer='27'][data-head='8']"
    page.locator(thumbnail).scroll_into_view_if_needed()
    page.wait_for_function("window.glassformerViewer.decodedLayers().includes(27)")
    assert drawn(page, thumbnail)
    page.click("#lang-zh")
    assert drawn(page, "#heatmap-canvas") and drawn(page, "#head-canvas")
    watched.checked()


def test_minilm_page_is_bidirectional(tmp_path, open_page, drawn):
    transformers = pytest.importorskip("transformers")
    path = named_or_skip("minilm")
    model = load_pretrained(path)
    ids = model.tokenizer.encode(MINILM_TEXT)
    theirs = reference_attentions(lambda: transformers.BertModel.from_pretrained(
        str(path), attn_implementation="eager").eval(), ids)
    page_path = show(model, MINILM_TEXT, tmp_path / "minilm.html", name="minilm")
    watched = open_page(page_path)
    page = watched.page
    assert page.evaluate("window.glassformerViewer.logitLens(0, 0)") is None
    for layer in (0, 5):
        shown = np.array(page.evaluate(f"window.glassformerViewer.attention({layer}, 1)"))
        assert np.abs(shown - theirs[layer][0, 1]).max() <= PAGE_ATOL
        assert np.triu(shown, 1).max() > 0.01                      # sees the tokens after it
    groups = page.evaluate("window.glassformerViewer.groups()")
    assert "".join(group["text"] for group in groups) == MINILM_TEXT
    assert drawn(page, "#heatmap-canvas")
    watched.checked()
