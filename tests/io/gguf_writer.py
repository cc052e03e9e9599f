"""A test-side GGUF writer for Qwen3-Next and Qwen3.5, written from llama.cpp's description of
convert_hf_to_gguf.py (not from io/gguf_names/): names from the gguf package's own tensor map,
metadata through GGUFWriter's add_* methods, and the conversions spelled out once more here:
A_log -> -exp(A_log), dt_bias -> ssm_dt.bias, conv1d squeezed, zero-centred norms + 1,
Qwen3-Next's in_proj_qkvz split into attn_qkv and attn_gate, experts stacked, and Qwen3.5's value
heads reordered from grouped to tiled by an explicit index permutation."""
import re

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")


def _value_head_order(hk: int, hv: int) -> np.ndarray:
    """New position j = r * Hk + k holds HF's value head k * G + r (G = Hv / Hk)."""
    g = hv // hk
    return np.array([k * g + r for r in range(g) for k in range(hk)])


def _reorder(x: np.ndarray, order: np.ndarray, width: int, axis: int = 0) -> np.ndarray:
    index = (order[:, None] * width + np.arange(width)).reshape(-1)
    return np.take(x, index, axis=axis)


def _name(names, hf_name: str) -> str:
    """The GGUF name the gguf package's tensor map gives an HF tensor name."""
    mapped = names.get_name(hf_name, try_suffixes=(".weight", ".bias"))
    assert mapped is not None, hf_name
    return mapped


def write_hf_as_gguf(path, model, arch: str) -> None:
    """model: a transformers Qwen3NextForCausalLM (arch "qwen3next") or Qwen3_5ForCausalLM
    ("qwen35")."""
    c = model.config
    hk, hv = c.linear_num_key_heads, c.linear_num_value_heads
    dk, dv = c.linear_key_head_dim, c.linear_value_head_dim
    tiled = arch == "qwen35" and hk != hv
    order = _value_head_order(hk, hv)
    full = [i for i, kind in enumerate(c.layer_types) if kind == "full_attention"]
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_block_count(c.num_hidden_layers)
    writer.add_context_length(c.max_position_embeddings)
    writer.add_embedding_length(c.hidden_size)
    writer.add_feed_forward_length(c.intermediate_size)
    writer.add_head_count(c.num_attention_heads)
    writer.add_head_count_kv(c.num_key_value_heads)
    writer.add_key_length(c.head_dim)
    writer.add_value_length(c.head_dim)
    writer.add_layer_norm_rms_eps(c.rms_norm_eps)
    writer.add_rope_freq_base(c.rope_parameters["rope_theta"])
    writer.add_rope_dimension_count(int(c.head_dim * c.rope_parameters["partial_rotary_factor"]))
    writer.add_ssm_conv_kernel(c.linear_conv_kernel_dim)
    writer.add_ssm_state_size(dk)
    writer.add_ssm_group_count(hk)
    writer.add_ssm_time_step_rank(hv)
    writer.add_ssm_inner_size(dv * hv)
    writer.add_full_attention_interval(full[0] + 1)
    if getattr(c, "num_experts", 0):
        writer.add_expert_count(c.num_experts)
        writer.add_expert_used_count(c.num_experts_per_tok)
        writer.add_expert_feed_forward_length(c.moe_intermediate_size)
        writer.add_expert_shared_feed_forward_length(c.shared_expert_intermediate_size)
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH[arch.upper()], c.num_hidden_layers)
    experts: dict[str, list] = {}
    out = {}
    for name, tensor in model.state_dict().items():
        data = tensor.detach().numpy().astype(np.float32)
        if name == "lm_head.weight" and c.tie_word_embeddings:
            continue
        if name.endswith("experts.gate_up_proj"):   # transformers 5: (E, 2F, C), gate first
            gate, up = np.split(data, 2, axis=1)
            out[_name(names, name.replace("gate_up_proj", "gate_proj.weight"))] = gate
            out[_name(names, name.replace("gate_up_proj", "up_proj.weight"))] = up
            continue
        if name.endswith("experts.down_proj"):      # (E, C, F)
            out[_name(names, name + ".weight")] = data
            continue
        if ".experts." in name:      # per-expert tensors: stacked to (E, out, in)
            experts.setdefault(re.sub(r"\.experts\.\d+\.", ".experts.", name), []).append(data)
            continue
        if name.endswith(".A_log"):
            data = -np.exp(data)
        if name.endswith(".dt_bias"):
            name = name.replace(".dt_bias", ".dt_proj.bias")
        if "conv1d" in name:
            data = data[:, 0, :]
        if name.endswith("norm.weight") and not name.endswith("linear_attn.norm.weight"):
            data = data + 1.0
        if tiled and ".linear_attn." in name:
            if "in_proj_qkv" in name or "conv1d" in name:
                qk = 2 * hk * dk
                data = np.concatenate([data[:qk], _reorder(data[qk:], order, dv)])
            elif "in_proj_z" in name:
                data = _reorder(data, order, dv)
            elif "in_proj_b" in name or "in_proj_a" in name or "A_log" in name or "dt_proj" in name:
                data = _reorder(data, order, 1)
            elif "out_proj" in name:
                data = _reorder(data, order, dv, axis=1)
        if "in_proj_qkvz" in name:   # per key head [q k v z] -> [all q | all k | all v], [all z]
            g = hv // hk
            per_head = data.reshape(hk, 2 * dk + 2 * g * dv, -1)
            q, k, v, z = np.split(per_head, np.cumsum([dk, dk, g * dv]), axis=1)
            bid = int(name.split(".")[2])
            out[f"blk.{bid}.attn_qkv.weight"] = np.concatenate(
                [p.reshape(-1, data.shape[1]) for p in (q, k, v)])
            out[f"blk.{bid}.attn_gate.weight"] = z.reshape(-1, data.shape[1])
            continue
        out[_name(names, name)] = data
    for name, parts in experts.items():
        out[_name(names, name)] = np.stack(parts)
    for name, data in out.items():
        writer.add_tensor(name, np.ascontiguousarray(data))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def rewrite(source, dest, *, drop_tensors=(), drop_keys=(), arch=None, set_keys=None,
            add_tensors=None) -> None:
    """Copy a GGUF file without some tensors or metadata keys, or with some set or added
    (set_keys: {key: uint32 value}; add_tensors: {name: array})."""
    set_keys, add_tensors = set_keys or {}, add_tensors or {}
    reader = gguf.GGUFReader(str(source))
    writer = gguf.GGUFWriter(str(dest), arch or reader.fields["general.architecture"].contents())
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture" or key in drop_keys \
                or key in set_keys:
            continue
        kind = gguf.GGUFValueType(field.types[0])
        sub = gguf.GGUFValueType(field.types[-1]) if kind == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(key, field.contents(), kind, sub_type=sub)
    for tensor in reader.tensors:
        if tensor.name not in drop_tensors:
            shape = tuple(int(d) for d in reversed(tensor.shape))
            writer.add_tensor(tensor.name, np.array(tensor.data).reshape(shape))
    for key, value in set_keys.items():
        writer.add_key_value(key, value, gguf.GGUFValueType.UINT32)
    for name, array in add_tensors.items():
        writer.add_tensor(name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
