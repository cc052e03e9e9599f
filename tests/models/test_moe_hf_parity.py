"""Qwen3, Qwen3-MoE, OLMoE and Mixtral against transformers (5.24), through files: a random
transformers model written with save_pretrained and read with glassformer.load_pretrained gives
the same logits (left padding included) and the same greedy continuation as its generate; the
folder glassformer's save_pretrained writes back loads in transformers with the same logits and
in glassformer with the same params. Bad config.json values and a missing expert tensor are one
CheckpointError line each."""
from __future__ import annotations

import json

import numpy as np
import pytest

from glassformer.blocks.names import prefixed, sub_params
from glassformer.errors import CheckpointError
from glassformer.io import hf_names
from glassformer.io.pretrained import load_pretrained, save_pretrained
from glassformer.io.safetensors import load_safetensors, save_safetensors
from glassformer.train.step import loss_and_grads

from tests.models.hf_check import assert_logits_and_greedy_match

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

HF_ATOL = 1e-4        # the bar for logits (measured: ~1e-6)
TORCH_RTOL = 1e-5     # float32 gradients, relative to max(|ref|, GRAD_FLOOR)
GRAD_FLOOR = 1e-6
EXPORT_RTOL = 1e-5    # the same float32 weights on both sides, relative to the largest logit
NEW_TOKENS = 12
V = 61                # an odd vocabulary
INIT_STD = 0.2        # wider than HF's 0.02: logits and router scores far apart, no near-ties
# transformers' loop over experts; its default grouped_mm kernel needs 16-byte strides, which odd
# test widths do not have (the numbers are the same)
EXPERTS = "eager"
# odd widths, GQA (4 query heads over 2 KV heads), 3 layers
DECODER = dict(vocab_size=V, hidden_size=24, intermediate_size=18, num_hidden_layers=3,
               num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
               initializer_range=INIT_STD, bos_token_id=None, eos_token_id=None,
               pad_token_id=None, rms_norm_eps=1e-6)
CONFIGS = {
    "qwen3": (transformers.Qwen3Config, transformers.Qwen3ForCausalLM, dict(head_dim=10)),
    "qwen3_moe": (transformers.Qwen3MoeConfig, transformers.Qwen3MoeForCausalLM,
                  dict(head_dim=10, num_experts=5, num_experts_per_tok=3,
                       moe_intermediate_size=7, norm_topk_prob=True, decoder_sparse_step=2)),
    "olmoe": (transformers.OlmoeConfig, transformers.OlmoeForCausalLM,
              dict(num_experts=6, num_experts_per_tok=2, norm_topk_prob=False)),
    "mixtral": (transformers.MixtralConfig, transformers.MixtralForCausalLM,
                dict(num_local_experts=4, num_experts_per_tok=2)),
}


def hf_model(kind: str):
    torch.manual_seed(0)
    config_class, model_class, extra = CONFIGS[kind]
    config = config_class(**DECODER, **extra)
    config._experts_implementation = EXPERTS
    model = model_class(config)
    with torch.no_grad():
        for p in model.parameters():
            if p.ndim == 1:   # norm gains off 1, so a norm applied to the wrong axis shows
                p.add_(torch.randn_like(p) * 0.1)
    return model.eval()


def prompts():
    rng = np.random.default_rng(0)
    ids = rng.integers(0, V, (2, 7))
    mask = np.ones((2, 7), np.int64)
    mask[1, :3] = 0   # left padding
    return ids, mask


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def saved(request, tmp_path_factory):
    """(kind, the transformers model, its save_pretrained folder)."""
    folder = tmp_path_factory.mktemp(request.param)
    reference = hf_model(request.param)
    reference.save_pretrained(folder)
    return request.param, reference, folder


@pytest.mark.slow
def test_logits_and_greedy_continuation_match(saved):
    kind, reference, folder = saved
    model = load_pretrained(folder)
    assert model.arch == ("mixtral" if kind == "mixtral" else "moe")
    ids, mask = prompts()
    assert_logits_and_greedy_match(model, reference, ids, mask, atol=HF_ATOL,
                                   new_tokens=NEW_TOKENS)


@pytest.mark.slow
def test_export_loads_in_transformers_and_back(saved, tmp_path):
    kind, reference, folder = saved
    model = load_pretrained(folder)
    save_pretrained(model, tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["model_type"] == kind
    hf = transformers.AutoModelForCausalLM.from_pretrained(tmp_path,
                                                           experts_implementation=EXPERTS).eval()
    assert type(hf) is type(reference)
    ids, _ = prompts()
    with torch.no_grad():
        theirs = hf(torch.from_numpy(ids)).logits.numpy()
    assert np.abs(model(ids) - theirs).max() <= EXPORT_RTOL * np.abs(theirs).max()
    back = load_pretrained(tmp_path)
    assert sorted(back.params) == sorted(model.params)
    for name, value in model.params.items():
        np.testing.assert_array_equal(back.params[name], value, err_msg=name)


@pytest.mark.slow
def test_gradients_equal_torch_autograd(saved):
    """The whole model's loss and every gradient (router, experts, QK-norm...) against torch's
    autograd through transformers' model on the same weights and batch."""
    from torchref import moe as torch_moe
    kind, reference, folder = saved
    model = load_pretrained(folder)
    rng = np.random.default_rng(1)
    x, y = rng.integers(0, V, (2, 9)), rng.integers(0, V, (2, 9))
    loss, grads = loss_and_grads(model.family, model.params, model.cfg, x, y, rng=None)
    reference.zero_grad()
    logits = reference(torch.from_numpy(x)).logits
    torch_loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V),
                                                   torch.from_numpy(y).reshape(-1))
    torch_loss.backward()
    assert loss == pytest.approx(torch_loss.item(), rel=TORCH_RTOL)
    # everything but the fused experts through the rename table; each MoE block by torchref
    plain = {k: p.grad.numpy() for k, p in reference.named_parameters()
             if ".experts." not in k and ".mlp.gate." not in k}
    table = hf_names.hf_keys_by_table_name(model.arch, plain)
    theirs = hf_names.to_glassformer(model.arch, model.cfg,
                                     {name: plain[key] for name, key in table.items()})
    for i, layer in enumerate(reference.model.layers):
        if hasattr(layer.mlp, "experts"):
            local = sub_params(model.params, f"blocks.{i}.mlp.")
            theirs.update(prefixed(torch_moe.grads(layer.mlp, local), f"blocks.{i}.mlp."))
    assert sorted(grads) == sorted(theirs)
    for key, grad in grads.items():
        err = np.abs(grad - theirs[key]).max() / max(np.abs(theirs[key]).max(), GRAD_FLOOR)
        assert err < TORCH_RTOL, (key, err)


def test_bad_folders_are_one_line_and_write_nothing(saved, tmp_path):
    kind, _, folder = saved
    if kind == "qwen3":
        pytest.skip("no experts")
    config = json.loads((folder / "config.json").read_text())
    experts_key = "num_local_experts" if "num_local_experts" in config else "num_experts"
    bad = tmp_path / "too_many"
    bad.mkdir()
    (bad / "model.safetensors").write_bytes((folder / "model.safetensors").read_bytes())
    (bad / "config.json").write_text(json.dumps({**config, "num_experts_per_tok":
                                                 config[experts_key] + 1}))
    with pytest.raises(CheckpointError, match=f"num_experts_per_tok={config[experts_key] + 1} "
                                              f"must be between 1 and {experts_key}=") as err:
        load_pretrained(bad)
    assert "\n" not in str(err.value)
    missing = tmp_path / "missing"
    missing.mkdir()
    (missing / "config.json").write_text(json.dumps(config))
    tensors = load_safetensors(folder / "model.safetensors")
    dropped = next(key for key in sorted(tensors) if ".experts.1." in key)
    del tensors[dropped]
    save_safetensors(missing / "model.safetensors", tensors)
    before = sorted(p.name for p in missing.iterdir())
    with pytest.raises(CheckpointError, match=f"missing tensor '{dropped[len('model.'):]}'"):
        load_pretrained(missing)
    assert sorted(p.name for p in missing.iterdir()) == before
