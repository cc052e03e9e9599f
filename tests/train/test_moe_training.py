"""`glassformer train --arch moe`: the objective's gradient (cross-entropy plus the weighted
auxiliary loss) against float64 central differences, the bias rule, the log's expert load and
auxiliary loss, a resume that continues bit for bit, the refusals, and the export that
transformers loads as Qwen3MoeForCausalLM with the same logits."""
import dataclasses
import json

import numpy as np
import pytest

from glassformer.cli import main
from glassformer.io.checkpoint import load_checkpoint, read_train_log
from glassformer.models.registry import family
from glassformer.ops.cross_entropy import cross_entropy_forward
from glassformer.ops.load_balance import load_balance_forward
from glassformer.train.loop import TrainConfig
from glassformer.train.objectives.moe_next_token import (BIAS_UPDATE_SPEED, MOE_NEXT_TOKEN, MoESettings,
                                                         bias_rule, routing)

FD_RTOL = 1e-6       # float64 central differences of a smooth loss (no top-k tie crossed)
FD_EPS = 1e-6
EXPORT_ATOL = 1e-4   # float32 logits through two implementations
TINY_MODEL = ["--arch", "moe", "--n-layer", "2", "--n-head", "2", "--d-model", "16",
              "--n-experts", "4", "--experts-per-token", "2", "--eval-iters", "2",
              "--no-progress", "--block-size", "16", "--batch-size", "4", "--eval-interval", "3"]
TINY = [*TINY_MODEL, "--workers", "1"]


def moe_config(**settings) -> TrainConfig:
    """A moe-next-token run's settings with these MoESettings."""
    return TrainConfig(objective="moe-next-token", objective_settings=MoESettings(**settings))


def tiny_model(dtype=np.float64, **fields):
    moe = family("moe")
    cfg = moe.config(vocab_size=11, max_seq_len=16, n_layer=2, n_head=2, n_kv_head=1,
                     d_model=12, n_experts=4, experts_per_token=2, expert_d_ff=6, **fields)
    params = moe.init_params(cfg, np.random.default_rng(0))
    # routers with clear preferences: no two experts tie within a central difference
    params = {key: (value * (30.0 if key.endswith("mlp.router") else 1.0)).astype(dtype)
              for key, value in params.items()}
    return moe, cfg, params


def total_loss(moe, cfg, params, x, y, coef, per_layer):
    """What the objective differentiates: cross-entropy + coef * the auxiliary loss."""
    logits, ctx = moe.forward(params, x, cfg)
    loss, _ = cross_entropy_forward(logits, y)
    aux, _ = load_balance_forward(*routing(ctx), per_layer=per_layer)
    return float(loss) + coef * float(aux)


@pytest.mark.parametrize("balance, per_layer", [("aux", True), ("aux-pooled", False)])
def test_aux_gradient_matches_central_differences(balance, per_layer):
    moe, cfg, params = tiny_model()
    rng = np.random.default_rng(1)
    x, y = rng.integers(0, 11, (2, 5)), rng.integers(0, 11, (2, 5))
    train_cfg = moe_config(balance=balance, router_aux_coef=0.5)
    loss, grads, _ = MOE_NEXT_TOKEN.loss_and_grads(moe, params, cfg, x, y, rng=None,
                                                train_cfg=train_cfg)
    for key in ("blocks.0.mlp.router", "blocks.1.mlp.router", "blocks.1.attn.wq"):
        for index in [(0, 0), (3, 2), (7, 1)]:
            nudged = {name: value.copy() for name, value in params.items()}
            nudged[key][index] += FD_EPS
            plus = total_loss(moe, cfg, nudged, x, y, 0.5, per_layer)
            nudged[key][index] -= 2 * FD_EPS
            minus = total_loss(moe, cfg, nudged, x, y, 0.5, per_layer)
            numeric = (plus - minus) / (2 * FD_EPS)
            assert np.isclose(grads[key][index], numeric, rtol=FD_RTOL, atol=1e-9), (key, index)
    plain, _, _ = MOE_NEXT_TOKEN.loss_and_grads(moe, params, cfg, x, y, rng=None,
                                             train_cfg=moe_config(balance="none"))
    assert loss == plain     # the returned loss is the LM loss alone


def test_bias_balance_moves_each_bias_against_its_load():
    moe, cfg, params = tiny_model(np.float32, router_bias=True)
    rng = np.random.default_rng(2)
    x, y = rng.integers(0, 11, (2, 5)), rng.integers(0, 11, (2, 5))
    train_cfg = moe_config(balance="bias")
    _, grads, _ = MOE_NEXT_TOKEN.loss_and_grads(moe, params, cfg, x, y, rng=None,
                                             train_cfg=train_cfg)
    load = grads["blocks.0.mlp.router_bias"].copy()
    assert np.isclose(load.sum(), 2 * 10)                  # k slots per token, N = 10 tokens
    before = params["blocks.0.mlp.router_bias"].copy()
    bias_rule(params, grads, train_cfg)
    moved = params["blocks.0.mlp.router_bias"] - before
    assert np.allclose(moved, BIAS_UPDATE_SPEED * np.sign(load.mean() - load))
    assert not grads["blocks.0.mlp.router_bias"].any()     # nothing left for AdamW


def test_run_logs_expert_load_resumes_and_exports(corpus, tmp_path):
    straight, split = tmp_path / "straight", tmp_path / "split"
    common = ["train", "--data", str(corpus), *TINY]
    assert main([*common, "--out", str(straight), "--max-iters", "6"]) == 0
    assert main([*common, "--out", str(split), "--max-iters", "3"]) == 0
    assert main(["train", "--out", str(split), "--resume", "--max-iters", "6",
                 "--no-progress"]) == 0
    log = read_train_log(straight)
    losses = {r["iter"]: r["train_loss"] for r in log if "train_loss" in r}
    assert {r["iter"]: r["train_loss"] for r in read_train_log(split)
            if "train_loss" in r} == losses
    evals = [r for r in log if "expert_load" in r]
    assert [r["iter"] for r in evals] == [0, 3, 6]
    for record in evals:
        load = np.array(record["expert_load"])
        assert load.shape == (2, 4) and np.allclose(load.sum(axis=1), 1.0, atol=1e-3)
        assert record["val_aux_loss"] >= 2.0 - 1e-6      # k = 2 is its least value
        assert "val_loss" in record
    assert load_checkpoint(straight).state["train_config"]["objective_settings"]["balance"] == "aux"


@pytest.mark.slow
def test_exported_run_loads_in_transformers_with_the_same_logits(corpus, tmp_path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    run, folder = tmp_path / "run", tmp_path / "hf"
    assert main(["train", "--data", str(corpus), *TINY, "--out", str(run),
                 "--max-iters", "3"]) == 0
    assert main(["convert", "--model", str(run), "--out", str(folder)]) == 0
    config = json.loads((folder / "config.json").read_text())
    assert config["architectures"] == ["Qwen3MoeForCausalLM"]
    # eager: transformers' loop over experts (its grouped_mm kernel needs 16-byte strides)
    reference = transformers.AutoModelForCausalLM.from_pretrained(
        folder, experts_implementation="eager").eval()
    from glassformer.io.pretrained import load_pretrained
    ours = load_pretrained(run)
    ids = np.array([[1, 5, 2, 7, 3, 3, 9]])
    logits, _ = ours.forward(ids)
    with torch.no_grad():
        expected = reference(torch.from_numpy(ids)).logits.numpy()
    np.testing.assert_allclose(logits, expected, atol=EXPORT_ATOL)


@pytest.mark.slow
def test_mla_run_logs_expert_load_and_exports_as_deepseek_v3(corpus, tmp_path):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    run, folder = tmp_path / "run", tmp_path / "hf"
    assert main(["train", "--data", str(corpus), *TINY, "--attention", "mla",
                 "--kv-lora-rank", "8", "--out", str(run), "--max-iters", "3"]) == 0
    assert [r["iter"] for r in read_train_log(run) if "expert_load" in r] == [0, 3]
    assert main(["convert", "--model", str(run), "--out", str(folder)]) == 0
    config = json.loads((folder / "config.json").read_text())
    assert config["architectures"] == ["DeepseekV3ForCausalLM"]
    assert config["kv_lora_rank"] == 8 and config["n_routed_experts"] == 4
    reference = transformers.AutoModelForCausalLM.from_pretrained(
        folder, experts_implementation="eager").eval()
    from glassformer.io.pretrained import load_pretrained
    ids = np.array([[1, 5, 2, 7, 3, 3, 9]])
    logits, _ = load_pretrained(run).forward(ids)
    with torch.no_grad():
        expected = reference(torch.from_numpy(ids)).logits.numpy()
    np.testing.assert_allclose(logits, expected, atol=EXPORT_ATOL)


@pytest.mark.parametrize("flag, value, words", [
    ("--experts-per-token", "0", "experts_per_token=0 must be between 1 and n_experts=4"),
    ("--experts-per-token", "5", "experts_per_token=5 must be between 1 and n_experts=4"),
    ("--balance", "sometimes", "--balance must be one of aux, aux-pooled, bias, none"),
    ("--router-aux-coef", "-1", "--router-aux-coef must be >= 0"),
    ("--attention", "gqa", "--attention must be one of mha, mla, got 'gqa'"),
])
def test_bad_settings_say_one_line_and_write_nothing(corpus, tmp_path, capsys, flag, value,
                                                     words):
    out = tmp_path / "run"
    assert main(["train", "--data", str(corpus), *TINY, "--out", str(out), flag, value]) == 2
    err = capsys.readouterr().err.strip()
    assert words in err and len(err.splitlines()) == 1
    assert not out.exists()


def test_a_dense_model_is_refused_by_the_moe_objective(corpus, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(["train", "--data", str(corpus), "--arch", "llama", "--objective",
                 "moe-next-token", "--out", str(out), "--no-progress", "--workers", "1"]) == 2
    assert "mixture-of-experts" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.slow
def test_bias_balance_on_two_ranks_is_the_one_rank_run(corpus, tmp_path):
    pytest.importorskip("mpi4py", reason="mpi4py is not installed")
    runs = {}
    for workers in ("1", "2"):
        out = tmp_path / f"ranks{workers}"
        assert main(["train", "--data", str(corpus), *TINY_MODEL, "--workers", workers,
                     "--out", str(out), "--max-iters", "4", "--balance", "bias"]) == 0
        runs[workers] = load_checkpoint(out)
    for layer in (0, 1):
        key = f"blocks.{layer}.mlp.router_bias"
        # the loads summed over ranks compare with their mean as the whole batch's do
        assert np.array_equal(runs["1"].params[key], runs["2"].params[key])
        assert np.abs(runs["2"].params[key]).max() > 0.0
