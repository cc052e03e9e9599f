"""The interpretability page in Chromium: `glassformer patch|attribute|heads --html` and
`glassformer sae features --html` on a tiny model draw the patching heat-map, the attribution bars
and grid, the head-score grids and an SAE's features with the numbers the library computes,
in English and 中文, offline, with no console error."""
import json

import numpy as np
import pytest

import glassformer.cli.attribute as attribute_cli
import glassformer.cli.heads as heads_cli
import glassformer.cli.patch as patch_cli
import glassformer.cli.sae as sae_cli
from glassformer.cli import main
from glassformer.interpret.attribution import logit_attribution
from glassformer.interpret.heads import head_scores
from glassformer.interpret.patching import logit_diff_metric, patch
from glassformer.interpret.sae.model import SAEConfig, init_sae
from glassformer.interpret.sae.saelens_folder import save_sae
from glassformer.models import llama
from glassformer.models.model import Model
from glassformer.tokenizers.char import CharTokenizer

V = "window.glassformerViewer"
TEXT = "the cat sat on the mat. the dog sat on the log. " * 40
HOOK = "blocks.0.hook_resid_post"


@pytest.fixture(scope="module")
def tiny():
    tokenizer = CharTokenizer.from_text(TEXT)
    cfg = llama.LlamaConfig(vocab_size=len(tokenizer.chars), max_seq_len=128, n_layer=2,
                            n_head=2, n_kv_head=1, d_model=16, d_ff=24)
    params = llama.init_params(cfg, np.random.default_rng(5))
    params = {k: (v * 6.0 if v.ndim == 2 else v).astype(np.float32) for k, v in params.items()}
    return Model(cfg, params, tokenizer)


@pytest.fixture
def shown(tiny, monkeypatch):
    for module in (patch_cli, attribute_cli, heads_cli, sae_cli):
        monkeypatch.setattr(module, "load_model_shown", lambda name, adapter=None: tiny)
    return tiny


def ids(model, text):
    return np.asarray(model.tokenizer.encode(text), np.int64)


def test_patching_page_draws_the_heat_map_of_the_library(shown, tmp_path, open_page, drawn,
                                                         capsys):
    out = tmp_path / "patch.html"
    assert main(["patch", "--model", "tiny", "--clean", "the cat sat", "--corrupt",
                 "the dog sat", "--target", "e", "--other", "a", "--kinds", "resid_pre,z",
                 "--html", str(out), "--lang", "en", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)          # stdout stays pure JSON
    target, other = ids(shown, "e")[0], ids(shown, "a")[0]
    result = patch(shown, ids(shown, "the cat sat"), ids(shown, "the dog sat"),
                   logit_diff_metric(target, other), ["resid_pre", "z"])
    watched = open_page(out)
    page = watched.page
    assert page.evaluate(f"{V}.sections()") == ["patching"]
    for kind in ("resid_pre", "z"):
        drawn_table = np.array(page.evaluate(f"{V}.patching('{kind}')"), dtype=float)
        expected = result.tables[kind].normalised(result.clean, result.corrupt)
        assert drawn_table.shape == expected.shape
        np.testing.assert_allclose(drawn_table, expected, atol=1e-4)
        assert page.evaluate(f"{V}.patchPeak('{kind}')") == [
            printed["tables"][kind]["peak_layer"], printed["tables"][kind]["peak_column"]]
        assert drawn(page, f"#patch-{kind}")
    assert "peak" in page.inner_text("#peak-resid_pre")
    page.evaluate(f"{V}.setLang('zh')")
    assert "峰值" in page.inner_text("#peak-resid_pre")
    assert "激活修补" in page.inner_text("#patching h2")
    watched.checked()


def test_attribution_page_bars_sum_to_the_logit(shown, tmp_path, open_page, drawn):
    out = tmp_path / "attr.html"
    assert main(["attribute", "--model", "tiny", "--prompt", "the cat sat on th", "--target",
                 "e", "--other", "a", "--html", str(out), "--lang", "zh"]) == 0
    result = logit_attribution(shown, ids(shown, "the cat sat on th"), ids(shown, "e")[0],
                               ids(shown, "a")[0])
    watched = open_page(out)
    page = watched.page
    assert page.evaluate(f"{V}.lang()") == "zh"
    terms = page.evaluate(f"{V}.attribution()")
    assert [t["label"] for t in terms] == result.labels
    np.testing.assert_allclose([t["value"] for t in terms], result.values, atol=1e-5)
    assert abs(sum(t["value"] for t in terms) - result.logit) < 1e-3
    grid = np.array(page.evaluate(f"{V}.attributionGrid()"))
    assert grid.shape == (2, 3)                            # 2 layers x (2 heads + the MLP)
    assert grid[1, 2] == pytest.approx(result.values[result.labels.index("L1 MLP")], abs=1e-5)
    bars = page.query_selector_all("#attr-bars .attr-bar")
    assert 0 < len(bars) <= 20
    top = max(result.labels, key=lambda label: abs(result.values[result.labels.index(label)]))
    assert bars[0].get_attribute("data-label") == top
    assert drawn(page, "#attr-grid")
    assert "直接 logit 归因" in page.inner_text("#attribution h2")
    watched.checked()


def test_heads_page_draws_every_kind(shown, tmp_path, open_page, drawn):
    out = tmp_path / "heads.html"
    assert main(["heads", "--model", "tiny", "--kind", "all", "--seq-len", "10", "--batch", "2",
                 "--threshold", "0.2", "--html", str(out), "--lang", "en"]) == 0
    watched = open_page(out)
    page = watched.page
    for kind in ("induction", "previous_token", "duplicate_token"):
        scores = head_scores(shown, kind, seq_len=10, batch=2, bos=None)
        np.testing.assert_allclose(page.evaluate(f"{V}.headScores('{kind}')"), scores,
                                   atol=1e-4)
        above = {(l, h) for l, h in np.argwhere(scores > 0.2)}
        assert {(l, h) for l, h, _ in page.evaluate(f"{V}.headsAbove('{kind}')")} == above
        assert drawn(page, f"#heads-{kind}")
    page.click("#lang-zh")
    assert "归纳头" in page.inner_text("#heads")
    watched.checked()


def test_sae_feature_page_shows_top_contexts_and_logit_effect(shown, tmp_path, open_page):
    folder = tmp_path / "sae"
    cfg = SAEConfig(d_in=16, d_sae=32, arch="relu", l1=1.0)
    params = init_sae(cfg, np.random.default_rng(0))
    save_sae(folder, params, cfg, {"model_name": "tiny", "hook_name": HOOK})
    data = tmp_path / "text.txt"
    data.write_text(TEXT, encoding="utf-8")
    out = tmp_path / "sae.html"
    assert main(["sae", "features", "--model", "tiny", "--data", str(data), "--sae",
                 str(folder), "--tokens", "256", "--context", "64", "--count", "4",
                 "--html", str(out), "--lang", "en"]) == 0
    watched = open_page(out)
    page = watched.page
    features = page.evaluate(f"{V}.features()")
    assert 1 <= len(features) <= 4
    feature = page.evaluate(f"{V}.feature({features[0]})")
    values = [c["value"] for c in feature["contexts"]]
    assert values == sorted(values, reverse=True) and values[0] == feature["max"] > 0
    for context in feature["contexts"]:
        assert context["acts"][context["at"]] == context["value"]
    w_u = shown.params["lm_head"] if "lm_head" in shown.params else shown.params["tok_emb"].T
    effect = (params["w_dec"][features[0]] * shown.params["norm_f.w"]) @ w_u
    assert feature["raises"][0]["id"] == int(np.argmax(effect))
    assert feature["lowers"][0]["id"] == int(np.argmin(effect))
    assert page.get_attribute("#feature-body", "data-feature") == str(features[0])
    if len(features) > 1:
        page.click(f"#feature-{features[1]}")
        assert page.get_attribute("#feature-body", "data-feature") == str(features[1])
    assert len(page.query_selector_all("#feature-body .context")) == len(feature["contexts"])
    page.evaluate(f"{V}.setLang('zh')")
    assert "稀疏自编码器" in page.inner_text("#sae h2")
    watched.checked()


def test_bad_pages_are_one_line(shown, tmp_path, capsys):
    missing = tmp_path / "no" / "page.html"
    assert main(["heads", "--model", "tiny", "--html", str(missing)]) == 2
    err = capsys.readouterr().err
    assert "folder does not exist" in err and "Traceback" not in err and not missing.exists()
    data = tmp_path / "text.txt"
    data.write_text(TEXT, encoding="utf-8")
    assert main(["sae", "features", "--model", "tiny", "--data", str(data), "--sae",
                 str(tmp_path), "--feature", "x"]) == 2
    assert "--html" in capsys.readouterr().err


def test_inline_view_frames_the_same_page(shown, tmp_path, open_page):
    from glassformer.viewer.interp_page import heads_section, interp_page_data, interp_view
    scores = {"induction": head_scores(shown, "induction", seq_len=10, batch=2)}
    view = interp_view(interp_page_data("tiny", heads=heads_section(
        scores, threshold=0.4, seq_len=10, batch=2, seed=0)), lang="zh")
    assert "InterpView(tiny: heads)" == repr(view)
    markup = view._repr_html_()
    assert markup.startswith("<iframe") and "glassformer-view" in markup
    path = tmp_path / "nb.html"
    path.write_text(f'<!DOCTYPE html><html><head><meta charset="utf-8"></head><body>{markup}'
                    "</body></html>", encoding="utf-8")
    watched = open_page(path)
    frame = watched.page.wait_for_selector("iframe.glassformer-view").content_frame()
    frame.wait_for_function("() => window.glassformerViewer !== undefined")
    assert frame.evaluate(f"{V}.lang()") == "zh"
    np.testing.assert_allclose(frame.evaluate(f"{V}.headScores('induction')"),
                               scores["induction"], atol=1e-4)
    assert watched.errors == []
