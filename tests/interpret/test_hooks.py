"""Hook points on every family (GPT-2, LLaMA, MoE, DeepSeek-V3's MLA, BERT): every listed name
is read with its listed shape, reading changes nothing, replacements act where they say, and bad
input is one line."""
import numpy as np
import pytest

from glassformer.errors import GlassformerError
from glassformer.interpret.cache import cache_bytes, run_with_cache, run_with_hooks
from glassformer.interpret.hooks import hook_shapes
from glassformer.models import bert, deepseek_v3, gpt2, llama, moe
from glassformer.models.model import Model

IDS = np.array([[1, 4, 2, 7, 3, 1]])

CONFIGS = {
    "gpt2": gpt2.GPT2Config(vocab_size=11, max_seq_len=16, n_layer=2, n_head=2, d_model=8),
    "llama": llama.LlamaConfig(vocab_size=11, max_seq_len=16, n_layer=2, n_head=4, n_kv_head=2,
                               d_model=8, d_ff=12),
    "moe": moe.MoeLlamaConfig(vocab_size=11, max_seq_len=16, n_layer=2, n_head=4, n_kv_head=2,
                              d_model=8, d_ff=12, n_experts=4, experts_per_token=2,
                              expert_d_ff=6, sparse_step=2),
    "deepseek_v3": deepseek_v3.DeepseekV3Config(
        vocab_size=11, max_seq_len=16, n_layer=2, n_head=3, d_model=12, d_ff=10, q_lora_rank=5,
        kv_lora_rank=6, qk_nope_head_dim=3, qk_rope_head_dim=4, v_head_dim=2),
    "bert": bert.BertConfig(vocab_size=11, max_seq_len=8, n_types=2, n_layer=2, n_head=2,
                            d_model=8, d_ff=12, mlm_head=True),
}
FAMILIES = {"gpt2": gpt2, "llama": llama, "moe": moe, "deepseek_v3": deepseek_v3, "bert": bert}


def build(name):
    cfg = CONFIGS[name]
    params = FAMILIES[name].FAMILY.init_params(cfg, np.random.default_rng(0))
    rng = np.random.default_rng(1)
    params = {k: (v + rng.standard_normal(v.shape) * 0.3).astype(np.float32)
              for k, v in params.items()}
    return Model(cfg, params)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_every_hook_is_read_with_its_shape_and_reading_changes_nothing(name):
    model = build(name)
    logits, cache = run_with_cache(model, IDS)
    shapes = hook_shapes(model, *IDS.shape)
    assert sorted(cache) == sorted(shapes)
    for hook, shape in shapes.items():
        assert cache[hook].shape == shape, hook
        assert np.isfinite(cache[hook]).any(), hook
    np.testing.assert_array_equal(logits, model(IDS))
    assert cache_bytes(model, IDS) >= cache.nbytes() - 64 * len(cache)


@pytest.mark.parametrize("name", ["gpt2", "llama", "moe", "deepseek_v3"])
def test_the_stream_adds_up(name):
    """resid_post = resid_pre + attn_out + mlp_out, and the next layer starts where one ends."""
    model = build(name)
    _, cache = run_with_cache(model, IDS)
    for layer in range(2):
        p = f"blocks.{layer}."
        total = cache[p + "hook_resid_pre"] + cache[p + "hook_attn_out"] + cache[p + "hook_mlp_out"]
        np.testing.assert_allclose(cache[p + "hook_resid_post"], total, atol=1e-5)
    np.testing.assert_array_equal(cache["blocks.1.hook_resid_pre"],
                                  cache["blocks.0.hook_resid_post"])


def test_moe_and_mla_points():
    _, cache = run_with_cache(build("moe"), IDS)
    assert cache["blocks.1.mlp.hook_router_logits"].shape == (1, 6, 4)
    assert cache["blocks.1.mlp.hook_expert_indices"].dtype.kind == "i"
    _, cache = run_with_cache(build("deepseek_v3"), IDS)
    assert cache["blocks.0.attn.hook_latent"].shape == (1, 6, 6)
    np.testing.assert_allclose(cache["blocks.0.attn.hook_pattern"].sum(-1), 1.0, atol=1e-6)


@pytest.mark.parametrize("name", ["gpt2", "llama", "moe", "bert"])
def test_hooks_that_return_none_or_the_same_value_change_nothing(name):
    model = build(name)
    seen = []

    def look(value, hook):
        seen.append(hook)
    names = ["blocks.0.hook_resid_pre", "blocks.1.attn.hook_z", "blocks.0.attn.hook_pattern",
             "blocks.1.hook_mlp_out"]
    logits = run_with_hooks(model, IDS, [(n, look) for n in names])
    np.testing.assert_array_equal(logits, model(IDS))
    assert sorted(seen) == sorted(names)
    same = run_with_hooks(model, IDS, [("blocks.0.hook_resid_mid", lambda v, h: v.copy())])
    np.testing.assert_array_equal(same, model(IDS))


def test_a_replacement_acts_where_it_says():
    model = build("llama")
    _, clean = run_with_cache(model, IDS)
    other = np.array([[3, 3, 5, 1, 2, 9]])
    # the whole stream entering layer 1 replaced by the clean run's: the clean logits
    patched = run_with_hooks(model, other, [
        ("blocks.1.hook_resid_pre", lambda v, h: clean["blocks.1.hook_resid_pre"])])
    np.testing.assert_allclose(patched, model(IDS), atol=1e-5)
    # v replaced, then read back through z: the pattern times the new v
    ones = lambda v, h: np.ones_like(v)  # noqa: E731
    _, cache = run_with_cache(model, IDS)
    logits = run_with_hooks(model, IDS, [("blocks.0.attn.hook_v", ones)])
    assert np.abs(logits - model(IDS)).max() > 1e-4


def test_bad_input_is_one_line():
    model = build("gpt2")
    with pytest.raises(GlassformerError, match="near names: blocks.0.hook_resid_pre"):
        run_with_cache(model, IDS, ["blocks.0.hook_resid_pree"])
    with pytest.raises(GlassformerError, match=r"hook blocks.0.attn.hook_z returned shape "
                       r"\(1, 6, 2\) dtype float32; expected shape \(1, 6, 2, 4\)"):
        run_with_hooks(model, IDS, [("blocks.0.attn.hook_z", lambda v, h: v[..., 0])])
    with pytest.raises(GlassformerError, match="dtype float64; expected shape"):
        run_with_hooks(model, IDS, [("blocks.0.hook_resid_pre", lambda v, h: v.astype(float))])
    with pytest.raises(GlassformerError, match="can be read but not replaced"):
        run_with_hooks(model, IDS, [("blocks.0.attn.hook_pattern", lambda v, h: v * 0)])
    with pytest.raises(GlassformerError, match="can be read but not replaced in deepseek_v3"):
        run_with_hooks(build("deepseek_v3"), IDS, [("blocks.0.attn.hook_z", lambda v, h: v * 0)])
    with pytest.raises(GlassformerError, match="can be read but not replaced in bert"):
        run_with_hooks(build("bert"), IDS, [("hook_embed", lambda v, h: v * 0)])
    with pytest.raises(GlassformerError, match="--max-cache-mb"):
        run_with_cache(model, IDS, max_cache_mb=0.001)
    _, cache = run_with_cache(model, IDS, ["hook_embed"])
    with pytest.raises(GlassformerError, match="near names: hook_embed"):
        cache["hook_embd"]
