"""DeepSeek-V3 against transformers' DeepseekV3ForCausalLM, through files: random configs written
with save_pretrained load with the same logits (left padding) and the same greedy continuation;
glassformer's save_pretrained writes a folder transformers loads with the same logits; bad
folders get one line each."""
import json

import numpy as np
import pytest

from glassformer.errors import CheckpointError
from glassformer.io.pretrained import load_pretrained, save_pretrained
from glassformer.models.deepseek_v3 import FAMILY, DeepseekV3Config
from glassformer.models.model import Model
from safetensors.numpy import load_file, save_file

from tests.models.hf_check import assert_logits_and_greedy_match

torch = pytest.importorskip("torch")
# the reference pinned: DeepseekV3 with rope_parameters and experts_implementation (5.x)
transformers = pytest.importorskip("transformers", minversion="5.24")

HF_ATOL = 1e-4        # the bar for logits
EXPORT_ATOL = 1e-5    # export round trip: the same float32 weights on both sides
NEW_TOKENS = 24
V = 97
INIT_STD = 0.2        # wider than HF's 0.02 so logits are far apart and greedy has no near-ties
# transformers' loop over experts; its default grouped_mm kernel needs 16-byte strides, which odd
# test widths do not have (the numbers are the same)
EXPERTS = "eager"

# odd widths throughout; "yarn" also interleaves RoPE pairs and scales the softmax (mscale)
HF_CONFIGS = {
    "q-lora-yarn": dict(q_lora_rank=10, rope_interleave=True,
                        rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0,
                                         "factor": 4.0, "original_max_position_embeddings": 16,
                                         "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 0.7,
                                         "mscale_all_dim": 1.0}),
    "plain-q-rotate-half": dict(q_lora_rank=None, rope_interleave=False,
                                rope_parameters={"rope_type": "default", "rope_theta": 500.0},
                                tie_word_embeddings=True),
    # DeepSeek-V3's MoE after one dense layer: 8 experts in 4 groups, 2 groups kept, 3 experts
    # per token, 2 shared experts, the correction bias off zero
    "moe-grouped": dict(q_lora_rank=10, num_hidden_layers=3, first_k_dense_replace=1,
                        n_routed_experts=8, num_experts_per_tok=3, moe_intermediate_size=6,
                        n_group=4, topk_group=2, n_shared_experts=2, routed_scaling_factor=2.5),
    "moe-unnormalised": dict(q_lora_rank=None, num_hidden_layers=2, first_k_dense_replace=1,
                             n_routed_experts=6, num_experts_per_tok=2, moe_intermediate_size=5,
                             n_group=1, topk_group=1, n_shared_experts=1, norm_topk_prob=False,
                             routed_scaling_factor=1.5),
}


def hf_model(name: str):
    torch.manual_seed(0)
    cfg = transformers.DeepseekV3Config(
        **{"num_hidden_layers": 2, "first_k_dense_replace": 2, **HF_CONFIGS[name]},
        vocab_size=V, hidden_size=24, intermediate_size=40, num_attention_heads=3,
        num_key_value_heads=3, kv_lora_rank=12, qk_nope_head_dim=6, qk_rope_head_dim=4,
        v_head_dim=5, max_position_embeddings=64, rms_norm_eps=1e-5,
        initializer_range=INIT_STD, bos_token_id=None, eos_token_id=None)
    cfg._experts_implementation = EXPERTS
    model = transformers.DeepseekV3ForCausalLM(cfg)
    torch.manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            if p.ndim == 1:   # norm gains away from 1
                p.add_(torch.randn_like(p) * 0.1)
        for key, buffer in model.named_buffers():
            if key.endswith("e_score_correction_bias"):   # a buffer: chooses, never weighs
                buffer.add_(torch.randn_like(buffer) * 0.1)
    return model.eval()


def prompts():
    rng = np.random.default_rng(0)
    ids = rng.integers(0, V, (2, 7))
    mask = np.ones((2, 7), np.int64)
    mask[1, :2] = 0   # left padding
    return ids, mask


@pytest.mark.slow
@pytest.mark.parametrize("name", HF_CONFIGS)
def test_logits_and_greedy_continuation_match(name, tmp_path):
    reference = hf_model(name)
    reference.save_pretrained(tmp_path)
    model = load_pretrained(tmp_path)
    assert model.arch == "deepseek_v3"
    ids, mask = prompts()
    assert_logits_and_greedy_match(model, reference, ids, mask, atol=HF_ATOL,
                                   new_tokens=NEW_TOKENS)


EXPORTS = {
    "default-rope": {},
    "yarn": dict(rope_type="yarn", rope_factor=4.0, rope_original_max_seq_len=16,
                 rope_attention_factor=0.9, rope_mscale_all_dim=1.0),
    "moe": dict(n_layer=3, n_experts=6, experts_per_token=2, expert_d_ff=4, n_shared_experts=1,
                first_k_dense_replace=1, n_group=3, topk_group=2, routed_scaling_factor=2.0),
}


@pytest.mark.slow
@pytest.mark.parametrize("name", EXPORTS)
def test_save_pretrained_loads_in_transformers_with_the_same_logits(name, tmp_path):
    sizes = dict(vocab_size=V, max_seq_len=64, n_layer=2, n_head=3, d_model=24, d_ff=40,
                 q_lora_rank=10, kv_lora_rank=12, qk_nope_head_dim=6, qk_rope_head_dim=4,
                 v_head_dim=5)
    cfg = DeepseekV3Config(**{**sizes, **EXPORTS[name]})
    rng = np.random.default_rng(0)
    params = {name: (value + rng.standard_normal(value.shape).astype(np.float32) * 0.1)
              for name, value in FAMILY.init_params(cfg, rng).items()}
    model = Model(cfg, params)
    save_pretrained(model, tmp_path)
    reference = transformers.DeepseekV3ForCausalLM.from_pretrained(
        tmp_path, experts_implementation=EXPERTS).eval()
    ids, _ = prompts()
    with torch.no_grad():
        ref = reference(torch.from_numpy(ids)).logits.numpy()
    assert np.abs(model(ids) - ref).max() <= EXPORT_ATOL
    again = load_pretrained(tmp_path)
    assert again.cfg == cfg


def _saved(tmp_path):
    hf_model("moe-grouped").save_pretrained(tmp_path)
    return json.loads((tmp_path / "config.json").read_text())


def test_bad_folders_get_one_line(tmp_path):
    config = _saved(tmp_path)
    for key, value, message in (
            ("scoring_func", "softmax", "scoring_func='softmax'.*supported: 'sigmoid'"),
            ("num_experts_per_tok", 9, "num_experts_per_tok=9 must be between 1 and "
                                       "n_routed_experts=8"),
            ("topk_method", "greedy", "topk_method='greedy'.*supported: 'noaux_tc'"),
            ("num_key_value_heads", 1, "one key and value per head"),
            ("use_fancy_attention", True, "key 'use_fancy_attention' is unknown")):
        (tmp_path / "config.json").write_text(json.dumps({**config, key: value}))
        with pytest.raises(CheckpointError, match=message) as err:
            load_pretrained(tmp_path)
        assert "\n" not in str(err.value)
    (tmp_path / "config.json").write_text(json.dumps(config))
    tensors = load_file(tmp_path / "model.safetensors")
    for key in ("model.layers.1.self_attn.kv_b_proj.weight",
                "model.layers.2.mlp.experts.5.up_proj.weight"):
        (tmp_path / "model.safetensors").unlink()
        save_file({k: v for k, v in tensors.items() if k != key}, tmp_path / "model.safetensors",
                  metadata={"format": "pt"})
        with pytest.raises(CheckpointError, match=f"missing tensor '{key[len('model.'):]}'"):
            load_pretrained(tmp_path)


TORCH_RTOL = 1e-5     # float32 gradients, relative to max(|ref|, GRAD_FLOOR)
GRAD_FLOOR = 1e-6


def _torch_grads(reference, cfg, x, y) -> tuple[float, dict]:
    """transformers' loss and every gradient, under glassformer's names and layouts. The experts
    live fused in memory (gate_up_proj (E, 2 F_e, C), down_proj (E, C, F_e)): split here."""
    from glassformer.io import hf_names
    reference.zero_grad()
    logits = reference(torch.from_numpy(x)).logits
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V), torch.from_numpy(y).ravel())
    loss.backward()
    grads = {k: p.grad.numpy() for k, p in reference.named_parameters()}
    fused = {k: g for k, g in grads.items() if ".experts." in k}
    table = hf_names.hf_keys_by_table_name("deepseek_v3", {k: 0 for k in grads if k not in fused})
    ours = hf_names.to_glassformer("deepseek_v3", cfg, {n: grads[k] for n, k in table.items()})
    for key, grad in fused.items():            # model.layers.{i}.mlp.experts.{gate_up,down}_proj
        layer = key.split(".")[2]
        prefix = f"blocks.{layer}.mlp.experts."
        if key.endswith("gate_up_proj"):
            gate, up = np.split(grad, 2, axis=1)                  # (E, 2 F_e, C) -> 2 x (E, F_e, C)
            ours[prefix + "w_gate"] = gate.transpose(0, 2, 1)     # -> (E, C, F_e)
            ours[prefix + "w_up"] = up.transpose(0, 2, 1)
        else:
            ours[prefix + "w_down"] = grad.transpose(0, 2, 1)     # (E, C, F_e) -> (E, F_e, C)
    return loss.item(), ours


@pytest.mark.slow
@pytest.mark.parametrize("name", ["q-lora-yarn", "moe-grouped"])
def test_every_gradient_matches_torch_autograd(name, tmp_path):
    """MLA (low-rank queries, interleaved YaRN RoPE) and DeepSeek-V3's MoE under the LM loss:
    glassformer's hand-written backward against torch autograd on transformers' model."""
    from glassformer.train.step import loss_and_grads
    reference = hf_model(name).train()
    reference.save_pretrained(tmp_path)
    model = load_pretrained(tmp_path)
    rng = np.random.default_rng(1)
    x, y = rng.integers(0, V, (2, 9)), rng.integers(0, V, (2, 9))
    loss, grads = loss_and_grads(model.family, model.params, model.cfg, x, y, rng=None)
    torch_loss, theirs = _torch_grads(reference, model.cfg, x, y)
    assert loss == pytest.approx(torch_loss, rel=TORCH_RTOL)
    # the correction bias only chooses: a zero gradient here, a buffer (no gradient) in torch
    bias = {k for k in grads if k.endswith("router_bias")}
    assert set(grads) - bias == set(theirs)
    assert all(not np.any(grads[k]) for k in bias)
    for key, ref in theirs.items():
        err = np.abs(grads[key] - ref).max() / max(np.abs(ref).max(), GRAD_FLOOR)
        assert err < TORCH_RTOL, (key, err)
