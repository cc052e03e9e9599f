"""GRPO's update in chunks of rows (train/objectives/grpo.py row_chunks): the same loss, metrics
and gradient as one forward of every row, for each loss type, with the KL term, clipped ratios
and a temperature; and the default chunk size for SmolLM2's recipe shapes."""
import numpy as np
import pytest

from glassformer.models import llama
from glassformer.train.loop import TrainConfig
from glassformer.train.objectives.dpo import REF_PREFIX
from glassformer.train.objectives.grpo import (GRPOSettings, Rollout, rollout_loss_and_grads,
                                               rollout_of, row_chunks)

SAME_RTOL = 1e-6     # float32 forwards of other shapes, float64 losses
GRAD_ATOL = 1e-6     # relative to the largest gradient entry
N, P, C, V = 6, 4, 5, 32


@pytest.fixture(scope="module")
def case():
    rng = np.random.default_rng(3)
    cfg = llama.LlamaConfig(vocab_size=V, max_seq_len=16, n_layer=1, n_head=2, n_kv_head=1,
                            d_model=16)
    params = llama.init_params(cfg, rng)
    frozen = {REF_PREFIX + key: value + np.float32(0.02) * rng.standard_normal(
        value.shape).astype(np.float32) for key, value in params.items()}
    prompt_mask = np.arange(P)[None, :] >= rng.integers(0, 2, N)[:, None]    # left padding
    lengths = rng.integers(1, C + 1, N)
    rollout = rollout_of(rng.integers(1, V, (N, P)), prompt_mask, rng.integers(1, V, (N, C)),
                         np.arange(C)[None, :] < lengths[:, None])
    old = rng.normal(-3.5, 0.3, rollout.y.shape).astype(np.float32)   # ratios past the clip
    return cfg, params, frozen, rollout, old, rng.standard_normal(N)


@pytest.mark.parametrize("loss_type", ["grpo", "dapo", "dr_grpo", "bnpo"])
def test_chunked_update_equals_one_forward(case, loss_type):
    cfg, params, frozen, rollout, old, advantages = case
    train_cfg = TrainConfig(objective="grpo", objective_settings=GRPOSettings(
        loss_type=loss_type, beta=0.1, temperature=0.7, max_completion_tokens=C))

    def update(rows):
        return rollout_loss_and_grads(llama, params, cfg, rollout, advantages, frozen=frozen,
                                      train_cfg=train_cfg, old_logps=old, dloss=0.5,
                                      chunk_rows=rows)

    loss, grads, metrics = update(N)                  # one chunk: every row at once
    assert metrics["clip_ratio/region_mean"] > 0.0 and metrics["kl"] > 0.0
    scale = max(float(np.abs(g).max()) for g in grads.values())
    for rows in (1, 4):                               # 6 chunks; 4 + 2 rows
        chunked_loss, chunked_grads, chunked_metrics = update(rows)
        assert chunked_loss == pytest.approx(loss, rel=SAME_RTOL)
        assert chunked_metrics == pytest.approx(metrics, rel=SAME_RTOL, abs=1e-9)
        for key, g in grads.items():
            np.testing.assert_allclose(chunked_grads[key], g, atol=GRAD_ATOL * scale, rtol=0,
                                       err_msg=f"{key}, {rows} rows a chunk")


def test_the_default_chunk_bounds_smollm2s_logits():
    # the GRPO recipe's update: 16 rows of ~111 ids over a 49,152-entry vocabulary
    shape = np.zeros((16, 111), np.int64)
    chunks = row_chunks(Rollout(x=shape, key_mask=shape == 0, y=shape), 49_152, None)
    assert [c.stop - c.start for c in chunks] == [6, 6, 4]
    assert row_chunks(Rollout(x=shape, key_mask=shape == 0, y=shape), 49_152, 16) == \
        [slice(0, 16)]
