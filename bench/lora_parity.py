"""LoRA parity figures against transformers + peft (the table in docs/lora.md).

On tiny random models saved by transformers (2 layers, C = 32; LLaMA with grouped KV heads, GPT-2
with its fused c_attn, BERT), with an adapter on every linear module (random non-zero A and B):

    peft -> glassformer   logits of load_pretrained(base, adapter=peft's folder) vs peft's
    glassformer -> peft   peft's logits of save_adapter's folder vs glassformer's (unmerged)
    merge                 merge_adapters vs peft's merge_and_unload(), max abs difference
    grads                 LoRA grads of one batch vs torch+peft autograd, worst relative error

Errors are relative to the largest entry of the reference (each grad's own). The tests
(tests/io/test_peft.py) hold the bars; this prints the figures.

    python bench/lora_parity.py

Last line: one JSON object with every figure.
"""
from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np
import peft
import torch
import transformers

from glassformer.io.hf_names import hf_keys_by_table_name, to_glassformer
from glassformer.io.peft import (LoraConfig, adapter_constants, init_adapters, load_adapter,
                                 merge_adapters, modules, save_adapter)
from glassformer.io.pretrained import load_pretrained
from glassformer.train.step import loss_and_grads

V = 97
TARGETS = {"llama": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                     "down_proj"],
           "gpt2": ["c_attn", "c_proj", "c_fc"], "bert": ["query", "key", "value", "dense"]}


def base_model(kind: str):
    torch.manual_seed(0)
    common = dict(vocab_size=V, initializer_range=0.2, bos_token_id=None, eos_token_id=None)
    if kind == "gpt2":
        return transformers.GPT2LMHeadModel(transformers.GPT2Config(
            n_positions=64, n_embd=32, n_layer=2, n_head=4, resid_pdrop=0.0, embd_pdrop=0.0,
            attn_pdrop=0.0, **common)).eval()
    if kind == "bert":
        return transformers.BertModel(transformers.BertConfig(
            hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
            max_position_embeddings=64, **common), add_pooling_layer=False).eval()
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(
        hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64, **common)).eval()


def peft_model(kind: str):
    config = peft.LoraConfig(r=4, lora_alpha=8, target_modules=TARGETS[kind], lora_dropout=0.0,
                             init_lora_weights=False, fan_in_fan_out=kind == "gpt2")
    torch.manual_seed(1)
    return peft.get_peft_model(base_model(kind), config).eval()


def outputs(torch_model, ids):
    with torch.no_grad():
        out = torch_model(torch.from_numpy(ids))
    return (out.logits if hasattr(out, "logits") else out.last_hidden_state).numpy()


def rel(ours, ref) -> float:
    return float(np.abs(ours - ref).max() / np.abs(ref).max())


def figures(kind: str, folder: Path) -> dict:
    ids = np.random.default_rng(0).integers(0, V, (2, 7))
    reference = peft_model(kind)
    base_model(kind).save_pretrained(folder / "base")
    reference.save_pretrained(folder / "peft")
    result = {"peft_to_glassformer": rel(load_pretrained(folder / "base",
                                                         adapter=folder / "peft")(ids),
                                         outputs(reference, ids))}
    if kind == "bert":
        return result
    model = load_pretrained(folder / "base")
    lora_cfg = LoraConfig(r=3, alpha=6.0, targets=tuple(TARGETS[kind]))
    rng = np.random.default_rng(2)
    adapters = {k: (rng.standard_normal(v.shape) * 0.3).astype(np.float32)
                for k, v in init_adapters(model, lora_cfg, rng).items()}
    save_adapter(folder / "ours", model, adapters, lora_cfg)
    unmerged, _ = model.family.forward({**model.params, **adapters,
                                        **adapter_constants(adapters, lora_cfg)}, ids, model.cfg)
    theirs = peft.PeftModel.from_pretrained(base_model(kind), folder / "ours").eval()
    result["glassformer_to_peft"] = rel(unmerged, outputs(theirs, ids))
    merged = merge_adapters(model, adapters, lora_cfg)
    state = {k: v.detach().numpy() for k, v in theirs.merge_and_unload().state_dict().items()}
    table = hf_keys_by_table_name(kind, state)
    expected = to_glassformer(kind, model.cfg, {n: state[k] for n, k in table.items()})
    result["merge_max_abs"] = max(float(np.abs(v - expected[n]).max())
                                  for n, v in merged.params.items())
    result["grads"] = grads_error(kind, model, reference, folder)
    return result


def grads_error(kind: str, model, reference, folder: Path) -> float:
    adapters, _ = load_adapter(folder / "peft", model)
    trained = {k: v for k, v in adapters.items() if k.endswith(("lora_A", "lora_B"))}
    frozen = {**model.params, **{k: v for k, v in adapters.items() if k not in trained}}
    rng = np.random.default_rng(1)
    x, y = rng.integers(0, V, (2, 9)), rng.integers(0, V, (2, 9))
    _, grads = loss_and_grads(model.family, trained, model.cfg, x, y, rng=None, frozen=frozen)
    reference.train()
    logits = reference(torch.from_numpy(x)).logits
    torch.nn.functional.cross_entropy(logits.reshape(-1, V),
                                      torch.from_numpy(y).reshape(-1)).backward()
    ours_of = {m.hf_module: m.weight for m in modules(kind, model.cfg)}
    worst = 0.0
    for key, p in reference.named_parameters():
        if p.requires_grad:
            module, part = key[len("base_model.model."):].split(".lora_")
            name = f"{ours_of[module]}.lora_{part.split('.')[0]}"
            worst = max(worst, rel(grads[name], p.grad.numpy().T))
    return worst


def main() -> None:
    results = {}
    for kind in ("llama", "gpt2", "bert"):
        with tempfile.TemporaryDirectory() as tmp:
            results[kind] = figures(kind, Path(tmp))
        print(kind.ljust(6), "  ".join(f"{k} {v:.1e}" for k, v in results[kind].items()),
              flush=True)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
