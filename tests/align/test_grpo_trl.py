"""GRPO against TRL's GRPOTrainer on the same weights (a tiny random Llama with a PEFT LoRA).

For fixed prompts, completions and advantages, TRL's own `GRPOTrainer._compute_loss(model,
inputs)` is called (its per-token log-probs, clipped surrogate, KL and reduction), then
`backward()`; ours is `rollout_loss_and_grads` on the same batch. Each --loss-type, with the
ratio at 1 (TRL's default, old log-probs = the policy's) and away from 1 (given old log-probs, so
tokens are clipped), with beta 0 and with the k3 KL to the adapter-free reference.
The advantages are checked against TRL's formula lines (its `nanstd`, the group mean, the
1e-4) on groups with ties, zero std and None rewards.
"""
import tempfile

import numpy as np
import pytest

from glassformer.io.peft import load_adapter
from glassformer.io.pretrained import load_pretrained
from glassformer.ops.grpo_loss import group_advantages
from glassformer.train.loop import TrainConfig
from glassformer.train.objectives.grpo import GRPOSettings, rollout_loss_and_grads, rollout_of

torch = pytest.importorskip("torch")
peft = pytest.importorskip("peft")
trl = pytest.importorskip("trl")
datasets = pytest.importorskip("datasets")
from test_dpo_trl import V, base_model, hf_tokenizer   # noqa: E402  (same tiny model)

pytestmark = pytest.mark.slow   # a TRL trainer per module, ~3 s a case on a loaded machine
TRL_ATOL = 1e-5    # the bar: float32 on both sides (measured ~1e-8)
G, P, C = 3, 4, 5  # group size, prompt width, completion width
TARGETS = ["q_proj", "v_proj", "up_proj"]


def zero_reward(prompts, completions, **columns):
    return [0.0] * len(prompts)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    folder = tmp_path_factory.mktemp("grpo_trl")
    base = base_model()
    base.save_pretrained(folder / "base")
    torch.manual_seed(1)
    model = peft.get_peft_model(base, peft.LoraConfig(
        r=4, lora_alpha=8, target_modules=TARGETS, lora_dropout=0.0, init_lora_weights=False))
    model.save_pretrained(folder / "adapter")
    args = trl.GRPOConfig(output_dir=tempfile.mkdtemp(dir=folder), report_to=[],
                          per_device_train_batch_size=G, num_generations=G,
                          max_completion_length=C, use_cpu=True, bf16=False)
    trainer = trl.GRPOTrainer(model=model, args=args, reward_funcs=zero_reward,
                              train_dataset=datasets.Dataset.from_list([{"prompt": "t1"}] * G),
                              processing_class=hf_tokenizer())
    trainer.current_gradient_accumulation_steps = 1
    ours = load_pretrained(folder / "base")
    adapters, _ = load_adapter(folder / "adapter", ours)
    return trainer, ours, adapters


def batch():
    """Left-padded prompts (N, P), right-padded completions (N, C), advantages (N,)."""
    rng = np.random.default_rng(3)
    n = 2 * G
    prompt_len = rng.integers(2, P + 1, n)
    prompt_mask = np.arange(P)[None, :] >= (P - prompt_len)[:, None]
    prompt_ids = np.where(prompt_mask, rng.integers(1, V, (n, P)), 0)
    completion_len = rng.integers(1, C + 1, n)
    completion_mask = np.arange(C)[None, :] < completion_len[:, None]
    completion_ids = np.where(completion_mask, rng.integers(1, V, (n, C)), 0)
    advantages = rng.standard_normal(n)
    return prompt_ids, prompt_mask, completion_ids, completion_mask, advantages


def trl_loss(trainer, loss_type, beta, old, parts):
    prompt_ids, prompt_mask, completion_ids, completion_mask, advantages = parts
    trainer.loss_type, trainer.beta = loss_type, beta
    trainer.model.zero_grad()
    inputs = {"prompt_ids": torch.from_numpy(prompt_ids),
              "prompt_mask": torch.from_numpy(prompt_mask.astype(np.int64)),
              "completion_ids": torch.from_numpy(completion_ids),
              "completion_mask": torch.from_numpy(completion_mask.astype(np.int64)),
              "advantages": torch.from_numpy(advantages.astype(np.float32)),
              "num_items_in_batch": torch.tensor(float(completion_mask.sum()))}
    if old is not None:
        inputs["old_per_token_logps"] = torch.from_numpy(old.astype(np.float32))
    if beta:
        ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
        mask = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
        with torch.no_grad(), trainer.model.disable_adapter():
            inputs["ref_per_token_logps"] = trainer._get_per_token_logps_and_entropies(
                trainer.model, ids, mask, C)[0]
    trainer.model.train()
    loss = trainer._compute_loss(trainer.model, inputs)
    loss.backward()
    grads = {name: p.grad.numpy().T for name, p in trainer.model.named_parameters()
             if p.grad is not None}
    return loss.item(), grads


@pytest.mark.parametrize("loss_type", ["grpo", "dapo", "dr_grpo", "bnpo"])
@pytest.mark.parametrize("clipped, beta", [(False, 0.0), (True, 0.04)])
def test_grpo_loss_and_grads_equal_trls(setup, loss_type, clipped, beta):
    trainer, model, adapters = setup
    parts = batch()
    prompt_ids, prompt_mask, completion_ids, completion_mask, advantages = parts
    old = None
    if clipped:   # old log-probs far enough from the policy's that ratios leave [0.8, 1.2]
        old = np.random.default_rng(4).normal(-4.6, 0.3, completion_ids.shape)
    their_loss, their_grads = trl_loss(trainer, loss_type, beta, old, parts)
    trained = {k: v for k, v in adapters.items() if k.endswith(("lora_A", "lora_B"))}
    frozen = {**model.params, **{k: v for k, v in adapters.items() if k not in trained}}
    rollout = rollout_of(prompt_ids, prompt_mask, completion_ids, completion_mask)
    our_old = None
    if old is not None:
        our_old = np.zeros(rollout.y.shape)
        our_old[:, P - 1:] = old        # completion token j is predicted at position P - 1 + j
    cfg = TrainConfig(objective="grpo", objective_settings=GRPOSettings(
        loss_type=loss_type, beta=beta, max_completion_tokens=C))
    loss, grads, metrics = rollout_loss_and_grads(model.family, trained, model.cfg, rollout,
                                                  advantages, frozen=frozen, train_cfg=cfg,
                                                  old_logps=our_old)
    assert loss == pytest.approx(their_loss, abs=TRL_ATOL)
    if clipped:
        assert metrics["clip_ratio/region_mean"] > 0.1     # the clipping was exercised
    names = {f"layers.{i}.{kind}.{m}": f"blocks.{i}.{part}" for i in range(2)
             for kind, m, part in (("self_attn", "q_proj", "attn.wq"),
                                   ("self_attn", "v_proj", "attn.wv"),
                                   ("mlp", "up_proj", "mlp.w_up"))}
    assert len(their_grads) == len(grads) == 12
    for name, value in their_grads.items():
        module, part = name[len("base_model.model.model."):].split(".lora_")
        key = f"{names[module]}.lora_{part.split('.')[0]}"
        np.testing.assert_allclose(grads[key], value, atol=TRL_ATOL, rtol=0)


def trl_advantages(rewards_per_func, weights, group, scale):
    """TRL 1.16's lines (GRPOTrainer._generate_and_score_completions, sum_then_normalize)."""
    from trl.trainer.utils import nanstd
    per_func = torch.tensor(rewards_per_func, dtype=torch.float32)
    unscorable = torch.isnan(per_func).all(dim=1)
    rewards = (per_func * torch.tensor(weights, dtype=torch.float32)[None]).nansum(dim=1)
    rewards[unscorable] = torch.nan
    mean = torch.nanmean(rewards.view(-1, group), dim=1).repeat_interleave(group, dim=0)
    if scale == "batch":
        std = nanstd(rewards).expand_as(rewards)
    else:
        std = nanstd(rewards.view(-1, group), dim=1).repeat_interleave(group, dim=0)
    advantages = rewards - mean
    if scale != "none":
        advantages = advantages / (std + 1e-4)
    return torch.nan_to_num(advantages, nan=0.0).numpy(), torch.isclose(std, torch.zeros_like(std)).numpy()


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
def test_advantages_equal_trls_with_ties_zero_std_and_none(scale):
    nan = np.nan
    rewards = np.array([[1.0, 0.5], [1.0, 0.5], [2.0, nan], [0.0, 1.0],      # ties, one None
                        [3.0, 3.0], [3.0, 3.0], [3.0, 3.0], [3.0, 3.0],      # zero std
                        [nan, nan], [1.0, nan], [nan, 2.0], [0.5, 0.5],      # unscorable row
                        [nan, nan], [nan, nan], [nan, nan], [4.0, nan]])     # one scorable
    weights = np.array([1.0, 0.5])
    ours, _, zero = group_advantages(rewards, weights, 4, scale=scale)
    theirs, their_zero = trl_advantages(rewards, weights, 4, scale)
    np.testing.assert_allclose(ours, theirs, atol=1e-5, rtol=1e-5)
    np.testing.assert_array_equal(zero, their_zero)
    assert np.all(ours[8] == 0.0) and np.all(np.isfinite(ours))
