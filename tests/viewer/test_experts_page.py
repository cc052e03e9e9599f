"""The experts view of a Mixture-of-Experts model's page: the page data read off the forward's
ctx, and in Chromium window.glassformerViewer.experts(layer) returning each token's chosen
experts and weights as the model computed them, the layer switch, the load histogram drawn,
both languages, and a dense model's page refusing the call."""
import numpy as np
import pytest

from glassformer.blocks.moe import chosen_experts, chosen_weights
from glassformer.blocks.residual import moe_block_ctx
from glassformer.models.model import Model
from glassformer.tokenizers.char import CharTokenizer
from glassformer.viewer import inspect
from glassformer.viewer.experts import Route, experts_data
from glassformer.viewer.page_data import model_page_data
from glassformer.viewer.show import show

WEIGHT_ATOL = 1e-4   # the page keeps 4 decimals of each weight
TEXT = "to be or not 水很清"


def tiny_moe_model():
    from glassformer.models.registry import family
    tokenizer = CharTokenizer(sorted(set(TEXT)))
    fam = family("moe")
    cfg = fam.config(vocab_size=tokenizer.vocab_size, n_layer=2, n_head=2, n_kv_head=1,
                     d_model=16, max_seq_len=32, n_experts=4, experts_per_token=2,
                     expert_d_ff=8)
    params = fam.init_params(cfg, np.random.default_rng(0))
    params = {key: value * 20.0 if key.endswith("mlp.router") else value   # clear preferences
              for key, value in params.items()}
    return Model(cfg, params, tokenizer)


def test_page_data_reads_the_routing_of_row_zero():
    model = tiny_moe_model()
    seen = inspect(model, TEXT)
    data = model_page_data(seen, name="tiny", text=TEXT, layers=[0, 1], heads=[0])
    experts = data["experts"]
    assert experts["n_experts"] == 4 and experts["k"] == 2
    for entry, block in zip(experts["layers"], seen.ctx.blocks):
        moe = moe_block_ctx(block)
        assert entry["experts"] == chosen_experts(moe).tolist()
        assert np.allclose(entry["weights"], chosen_weights(moe), atol=WEIGHT_ATOL)
        assert np.isclose(sum(entry["load"]), 1.0, atol=1e-3)    # 4 decimals each


def test_load_leaves_padding_out():
    route = Route(0, np.array([[0, 1], [2, 3], [2, 1]]), np.full((3, 2), 0.5))
    data = experts_data([route], 4, pad=np.array([False, False, True]))
    assert data["layers"][0]["load"] == [0.25, 0.25, 0.25, 0.25]
    assert experts_data([], 4, pad=np.zeros(3, bool)) is None


def test_experts_view_in_the_browser(tmp_path, open_page, drawn):
    model = tiny_moe_model()
    path = show(model, TEXT, tmp_path / "moe.html", name="tiny-moe", lang="en")
    seen = inspect(model, TEXT)
    watched = open_page(path)
    page = watched.page
    for layer in (0, 1):
        shown = page.evaluate(f"window.glassformerViewer.experts({layer})")
        moe = moe_block_ctx(seen.ctx.blocks[layer])
        assert [entry["experts"] for entry in shown] == chosen_experts(moe).tolist()
        weights = np.array([entry["weights"] for entry in shown])
        assert np.abs(weights - chosen_weights(moe)).max() <= WEIGHT_ATOL
        assert [entry["token"] for entry in shown] == list(range(len(shown)))
        assert [entry["id"] for entry in shown] == seen.ids[0].tolist()
    assert page.inner_text("#experts h2").endswith("0")
    page.select_option("#experts-layer", "1")
    assert page.inner_text("#experts h2").endswith("1")
    assert drawn(page, "#experts-canvas") and drawn(page, "#expert-load-canvas")
    page.click("#lang-zh")
    assert page.inner_text("#experts h2").startswith("专家")
    page.screenshot(path=tmp_path / "moe.png", full_page=True)
    watched.checked()


def test_a_dense_model_has_no_experts(tmp_path, open_page):
    from glassformer.models.gpt2 import GPT2Config, init_params
    tokenizer = CharTokenizer(sorted(set(TEXT)))
    cfg = GPT2Config(vocab_size=tokenizer.vocab_size, n_layer=1, n_head=2, d_model=16,
                     max_seq_len=32)
    model = Model(cfg, init_params(cfg, np.random.default_rng(0)), tokenizer)
    watched = open_page(show(model, TEXT, tmp_path / "dense.html", name="dense"))
    assert watched.page.locator("#experts").count() == 0
    with pytest.raises(Exception, match="no experts"):
        watched.page.evaluate("window.glassformerViewer.experts(0)")
    watched.checked()
