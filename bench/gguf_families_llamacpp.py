"""llama.cpp reads the GGUF files glassformer writes for Gemma 3, Qwen3-Next and Qwen3.5.

For each family a random transformers model (small, seeded) is saved as an HF folder, loaded by
glassformer and written with `save_gguf` (io/gguf_hf.py); a toy byte-level vocabulary is added
to the file (llama.cpp refuses a model without one; the ids are fed directly). Three sides then
give the logits of the same 20 ids: transformers on the HF model, glassformer on the GGUF file,
and llama.cpp (llama-cpp-python, a bench-only dependency) on the same file, with float32 KV
caches. The differences printed are the largest absolute logit differences to transformers.

Random configs use Dk = Dv for the hybrids: llama.cpp sizes Gated DeltaNet's value heads with
ssm.state_size (the key head width), as every released Qwen3-Next / Qwen3.5 has them equal.

    python bench/gguf_families_llamacpp.py [--tokens 20]

Last line: one JSON object, {family: {"glassformer": diff, "llama_cpp": diff, "scale": max|logit|}}.
"""
from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np

V = 97
HYBRID = dict(vocab_size=V, hidden_size=24, intermediate_size=40, num_attention_heads=3,
              num_key_value_heads=1, head_dim=8, linear_num_key_heads=2,
              linear_num_value_heads=4, linear_key_head_dim=6, linear_value_head_dim=6,
              linear_conv_kernel_dim=4, max_position_embeddings=256, rms_norm_eps=1e-5,
              initializer_range=0.2, bos_token_id=None, eos_token_id=None)
LIN, FULL = "linear_attention", "full_attention"


def reference(family: str):
    """A seeded random transformers model of `family`, 1-d params spread off their init."""
    import torch
    import transformers

    torch.manual_seed(0)
    if family == "qwen35":
        model = transformers.Qwen3_5ForCausalLM(transformers.Qwen3_5TextConfig(
            **HYBRID, layer_types=[LIN, LIN, LIN, FULL], num_hidden_layers=4))
    elif family == "qwen3next":
        model = transformers.Qwen3NextForCausalLM(transformers.Qwen3NextConfig(
            **HYBRID, layer_types=[LIN, FULL] * 2, num_hidden_layers=4, num_experts=4,
            num_experts_per_tok=2, moe_intermediate_size=7, shared_expert_intermediate_size=9))
        model.config._experts_implementation = "eager"
    else:   # gemma3: llama.cpp's own pattern, 5 local layers to 1 global
        model = transformers.Gemma3ForCausalLM(transformers.Gemma3TextConfig(
            vocab_size=V, hidden_size=40, intermediate_size=56, num_hidden_layers=6,
            num_attention_heads=2, num_key_value_heads=1, head_dim=256,
            query_pre_attn_scalar=256, max_position_embeddings=128, sliding_window=5,
            initializer_range=0.2, pad_token_id=None, bos_token_id=None, eos_token_id=None,
            attn_implementation="eager"))
    with torch.no_grad():
        for p in model.parameters():
            if p.ndim == 1:
                p.add_(torch.randn_like(p) * 0.1)
    return model.eval()


def byte_tokens(n: int) -> list[str]:
    """GPT-2's printable spelling of bytes 0 .. n-1 (bytes_to_unicode)."""
    printable = [*range(33, 127), *range(161, 173), *range(174, 256)]
    spelled, extra = {}, 0
    for b in range(256):
        if b in printable:
            spelled[b] = chr(b)
        else:
            spelled[b] = chr(256 + extra)
            extra += 1
    return [spelled[b] for b in range(n)]


def with_vocabulary(source: Path, dest: Path, n: int) -> None:
    """`source` with a toy byte-level BPE vocabulary of n tokens (one merge) added."""
    import gguf

    reader = gguf.GGUFReader(str(source))
    writer = gguf.GGUFWriter(str(dest), reader.fields["general.architecture"].contents())
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue
        kind = gguf.GGUFValueType(field.types[0])
        sub = gguf.GGUFValueType(field.types[-1]) if kind == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(key, field.contents(), kind, sub_type=sub)
    tokens = byte_tokens(n)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types([1] * n)
    writer.add_token_merges([f"{tokens[0]} {tokens[1]}"])
    for tensor in reader.tensors:
        shape = tuple(int(d) for d in reversed(tensor.shape))
        writer.add_tensor(tensor.name, np.array(tensor.data).reshape(shape))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def llama_cpp_logits(path: Path, ids: list[int]) -> np.ndarray:
    from llama_cpp import GGML_TYPE_F32, Llama

    llm = Llama(str(path), n_ctx=64, logits_all=True, verbose=False, n_threads=1,
                type_k=GGML_TYPE_F32, type_v=GGML_TYPE_F32)
    llm.eval(ids)
    logits = np.array(llm.scores[:len(ids)])
    llm.close()
    return logits


def check(family: str, ids: list[int], folder: Path) -> dict:
    import torch

    from glassformer.io.gguf import load_gguf
    from glassformer.io.gguf_hf import save_gguf
    from glassformer.io.pretrained import load_pretrained

    model = reference(family)
    model.save_pretrained(folder / family)
    save_gguf(load_pretrained(folder / family, tokenizer=False), folder / f"{family}.gguf")
    with_vocabulary(folder / f"{family}.gguf", folder / f"{family}.vocab.gguf", V)
    with torch.no_grad():
        want = model(torch.tensor([ids])).logits.numpy()[0]
    ours = load_gguf(folder / f"{family}.gguf")(np.array([ids]))[0]
    theirs = llama_cpp_logits(folder / f"{family}.vocab.gguf", ids)
    return {"glassformer": float(np.abs(ours - want).max()),
            "llama_cpp": float(np.abs(theirs - want).max()),
            "scale": float(np.abs(want).max())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=20, help="ids fed to each side")
    args = parser.parse_args()
    ids = [int(i) for i in np.random.default_rng(0).integers(0, V, args.tokens)]
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for family in ("qwen35", "qwen3next", "gemma3"):
            results[family] = check(family, ids, Path(tmp))
            row = results[family]
            print(f"{family:10s} max |logit - transformers|: glassformer {row['glassformer']:.2e}, "
                  f"llama.cpp {row['llama_cpp']:.2e} (logits up to {row['scale']:.2f})")
    print(json.dumps(results))


if __name__ == "__main__":
    main()
