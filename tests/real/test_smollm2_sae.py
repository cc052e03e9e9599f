"""An SAE on SmolLM2-135M-Instruct's middle residual stream (docs/sae.md), on text the docs do
not use: a later part of Tiny Shakespeare (from character 600,000), a smaller SAE and a shorter
run. It still reconstructs most of the stream and keeps most of the next-token loss. Slow: the
model reads ~2,300 tokens (minutes on a busy CPU)."""
import pytest

from glassformer.interpret.sae.model import SAEConfig
from glassformer.interpret.sae.run import StreamConfig, train_and_save
from glassformer.interpret.sae.saelens_folder import load_sae
from glassformer.interpret.sae.train import SAETrainConfig
from glassformer.packaged import corpus_path

pytestmark = pytest.mark.slow


def test_a_topk_sae_on_layer_15_keeps_the_next_token_loss(smollm2, tmp_path):
    text = corpus_path("tinyshakespeare").read_text(encoding="utf-8")[600_000:]
    cfg = SAEConfig(d_in=576, d_sae=1152, arch="topk", k=32, aux_k=1.0)
    report = train_and_save(smollm2, "smollm2", text, "blocks.15.hook_resid_post", cfg,
                            SAETrainConfig(steps=150, batch=256, lr=1e-3, log_every=50),
                            StreamConfig(tokens=2048, eval_tokens=256, context=128),
                            tmp_path / "sae", seed=3, log=lambda kind, info: None)
    metrics = report["eval"]
    assert report["sinks_dropped"] >= 16               # every window's first position at least
    assert metrics["l0"] == 32.0
    assert metrics["explained_variance"] > 0.5
    assert metrics["ce_clean"] < metrics["ce_sae"] < metrics["ce_zero"]
    assert metrics["ce_loss_recovered"] > 0.9
    params, back, metadata = load_sae(tmp_path / "sae")
    assert back.k == 32 and metadata["hook_name"] == "blocks.15.hook_resid_post"
