"""LoRA adapters in PEFT's format, against transformers + peft: an adapter peft saved loads in
glassformer with peft's logits, one glassformer saved loads in peft with glassformer's logits, the
merged weights equal merge_and_unload()'s, and the LoRA gradients equal torch autograd's."""
from __future__ import annotations

import json

import numpy as np
import pytest

from glassformer.errors import CheckpointError, GlassformerError
from glassformer.io.hf_names import hf_keys_by_table_name, to_glassformer
from glassformer.io.peft import (ADAPTER_CONFIG, LoraConfig, adapter_constants, init_adapters,
                                 load_adapter, merge_adapters, modules, save_adapter)
from glassformer.io.pretrained import load_pretrained

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")

LOGITS_RTOL = 1e-4   # the bar, relative to the largest logit (measured: ~1e-7)
MERGE_ATOL = 1e-6    # merged weights: the same float32 product on both sides (measured: ~1e-8)
GRAD_RTOL = 1e-5     # LoRA grads relative to the largest entry of each (measured: ~1e-7)
V = 97
TARGETS = {"llama": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                     "down_proj"],
           "gpt2": ["c_attn", "c_proj", "c_fc"],
           "bert": ["query", "value", "dense"]}


def base_model(kind: str):
    torch.manual_seed(0)
    common = dict(vocab_size=V, initializer_range=0.2, bos_token_id=None, eos_token_id=None)
    if kind == "gpt2":
        return transformers.GPT2LMHeadModel(transformers.GPT2Config(
            n_positions=64, n_embd=32, n_layer=2, n_head=4, resid_pdrop=0.0, embd_pdrop=0.0,
            attn_pdrop=0.0, **common)).eval()   # no dropout: train mode compares exactly
    if kind == "bert":
        return transformers.BertModel(transformers.BertConfig(
            hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
            max_position_embeddings=64, **common), add_pooling_layer=False).eval()
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(
        hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64, **common)).eval()


def peft_adapter(kind: str, **options):
    """A peft LoRA on a fresh base, with random non-zero A and B (init_lora_weights=False)."""
    config = peft.LoraConfig(r=4, lora_alpha=8, target_modules=TARGETS[kind], lora_dropout=0.0,
                             init_lora_weights=False, fan_in_fan_out=kind == "gpt2", **options)
    torch.manual_seed(1)
    return peft.get_peft_model(base_model(kind), config).eval()


def ids():
    return np.random.default_rng(0).integers(0, V, (2, 7))


def outputs(torch_model, x):
    with torch.no_grad():
        out = torch_model(torch.from_numpy(x))
    return (out.logits if hasattr(out, "logits") else out.last_hidden_state).numpy()


def assert_rel(ours, ref, rtol):
    np.testing.assert_allclose(ours, ref, rtol=0, atol=rtol * float(np.abs(ref).max()))


@pytest.mark.parametrize("kind, rslora", [("llama", False), ("llama", True), ("gpt2", False),
                                          ("bert", True)])
def test_peft_adapter_loads_with_peft_logits(kind, rslora, tmp_path):
    model = peft_adapter(kind, use_rslora=rslora)
    base_model(kind).save_pretrained(tmp_path / "base")   # the same seeded base, no adapters
    model.save_pretrained(tmp_path / "adapter")
    ours = load_pretrained(tmp_path / "base", adapter=tmp_path / "adapter")
    x = ids()
    assert_rel(ours(x), outputs(model, x), LOGITS_RTOL)


def random_adapters(model, lora_cfg, seed=2):
    """init_adapters, with B made non-zero so the adapters change the logits."""
    rng = np.random.default_rng(seed)
    adapters = init_adapters(model, lora_cfg, rng)
    return {k: (rng.standard_normal(v.shape) * 0.3).astype(np.float32) if k.endswith("lora_B")
            else v for k, v in adapters.items()}


@pytest.mark.parametrize("kind", ["llama", "gpt2"])
def test_our_adapter_loads_in_peft_and_merges_as_peft_does(kind, tmp_path):
    base_model(kind).save_pretrained(tmp_path / "base")
    model = load_pretrained(tmp_path / "base")
    lora_cfg = LoraConfig(r=3, alpha=6.0, targets=tuple(TARGETS[kind]), base_model="tiny")
    adapters = random_adapters(model, lora_cfg)
    save_adapter(tmp_path / "adapter", model, adapters, lora_cfg)
    x = ids()
    # glassformer's own forward with the adapters unmerged (the training path)
    unmerged, _ = model.family.forward({**model.params, **adapters,
                                        **adapter_constants(adapters, lora_cfg)}, x, model.cfg)
    theirs = peft.PeftModel.from_pretrained(base_model(kind), tmp_path / "adapter").eval()
    assert_rel(unmerged, outputs(theirs, x), LOGITS_RTOL)
    merged = merge_adapters(model, load_adapter(tmp_path / "adapter", model)[0])
    assert_rel(merged(x), unmerged, LOGITS_RTOL)
    reference = theirs.merge_and_unload()
    tensors = {k: v.detach().numpy() for k, v in reference.state_dict().items()}
    table = hf_keys_by_table_name(kind, tensors)
    expected = to_glassformer(kind, model.cfg, {n: tensors[k] for n, k in table.items()})
    for name, value in merged.params.items():
        np.testing.assert_allclose(value, expected[name], rtol=0, atol=MERGE_ATOL,
                                   err_msg=name)


@pytest.mark.parametrize("kind", ["llama", "gpt2"])
def test_lora_grads_equal_torch_autograd(kind, tmp_path):
    from glassformer.train.step import loss_and_grads   # the training seam: params vs frozen

    reference = peft_adapter(kind)
    reference.save_pretrained(tmp_path / "adapter")
    base_model(kind).save_pretrained(tmp_path / "base")
    model = load_pretrained(tmp_path / "base")
    adapters, lora_cfg = load_adapter(tmp_path / "adapter", model)
    trained = {k: v for k, v in adapters.items() if k.endswith(("lora_A", "lora_B"))}
    frozen = {**model.params, **{k: v for k, v in adapters.items() if k not in trained}}
    rng = np.random.default_rng(1)
    x, y = rng.integers(0, V, (2, 9)), rng.integers(0, V, (2, 9))
    loss, grads = loss_and_grads(model.family, trained, model.cfg, x, y, rng=None,
                                 frozen=frozen)
    reference.train()
    logits = reference(torch.from_numpy(x)).logits
    torch_loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V),
                                                   torch.from_numpy(y).reshape(-1))
    torch_loss.backward()
    assert loss == pytest.approx(torch_loss.item(), rel=GRAD_RTOL)
    assert set(grads) == set(trained)
    ours_of = {m.hf_module: m.weight for m in modules(kind, model.cfg)}
    theirs = {name: p.grad.numpy() for name, p in reference.named_parameters()
              if p.requires_grad}
    assert len(theirs) == len(grads)
    for key, value in theirs.items():   # base_model.model.<module>.lora_A.default.weight
        module, part = key[len("base_model.model."):].split(".lora_")
        name = f"{ours_of[module]}.lora_{part.split('.')[0]}"
        assert_rel(grads[name], value.T, GRAD_RTOL)


def test_bad_adapters_are_one_line_each(tmp_path):
    base_model("llama").save_pretrained(tmp_path / "base")
    model = load_pretrained(tmp_path / "base")
    with pytest.raises(GlassformerError, match="target 'c_attn' names no module of this llama "
                                               "model; its linear modules are down_proj, "):
        init_adapters(model, LoraConfig(targets=("q_proj", "c_attn")), np.random.default_rng(0))
    lora_cfg = LoraConfig(r=2, targets=("q_proj",))
    save_adapter(tmp_path / "ours", model, random_adapters(model, lora_cfg), lora_cfg)
    # the same shapes, other weights: the probe of the base refuses it
    torch.manual_seed(5)
    other = transformers.LlamaForCausalLM(base_model("llama").config)
    other.save_pretrained(tmp_path / "other")
    with pytest.raises(CheckpointError, match="this adapter was trained on .*weights differ"):
        load_pretrained(tmp_path / "other", adapter=tmp_path / "ours")
    # the same base at lower precision (noise of 5% of each weight, worse than bf16 or 4 bits)
    noisy = load_pretrained(tmp_path / "base")
    noise = np.random.default_rng(3).standard_normal(noisy.params["blocks.0.attn.wq"].shape)
    noisy.params["blocks.0.attn.wq"] = (noisy.params["blocks.0.attn.wq"] * (1 + 0.05 * noise)
                                        ).astype(np.float32)
    assert load_adapter(tmp_path / "ours", noisy)[1].r == 2
    # other shapes
    gpt2 = peft_adapter("gpt2")
    gpt2.save_pretrained(tmp_path / "gpt2")
    with pytest.raises(CheckpointError, match="adapts module 'transformer.h.0.attn.c_attn', which "
                                              "this llama model lacks"):
        load_adapter(tmp_path / "gpt2", model)
    wide = transformers.LlamaForCausalLM(transformers.LlamaConfig(
        hidden_size=48, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=V))
    wide.save_pretrained(tmp_path / "wide")
    with pytest.raises(CheckpointError, match=r"has shape \(2, 32\), but this model's "
                                              r".*q_proj needs \(2, 48\)"):
        load_pretrained(tmp_path / "wide", adapter=tmp_path / "ours")
    config = json.loads((tmp_path / "ours" / ADAPTER_CONFIG).read_text())
    (tmp_path / "ours" / ADAPTER_CONFIG).write_text(json.dumps({**config, "bias": "all"}))
    with pytest.raises(CheckpointError, match="bias is 'all'"):
        load_adapter(tmp_path / "ours", model)
    with pytest.raises(CheckpointError, match="has no adapter_config.json"):
        load_adapter(tmp_path / "base", model)
