"""transformers' own sparse MoE blocks loaded with glassformer's MoE params, for the float32
parity tests (tests/blocks/test_moe_block.py) and the speed bench (bench/moe_block.py): the
reference is the module HF runs, not a mirror written for the test.

    Mixtral     MixtralSparseMoeBlock      softmax, top-k, always renormalised
    Qwen3-MoE   Qwen3MoeSparseMoeBlock     softmax, top-k, norm_topk_prob
    DeepSeek-V3 DeepseekV3MoE              sigmoid, correction bias, groups, scaling, shared
    Qwen2-MoE   Qwen2MoeSparseMoeBlock     softmax, top-k, sigmoid-gated shared expert

HF keeps (out, in) weights and one fused (E, 2 F_e, C) gate|up tensor; ours are (in, out) and
stacked per name: `load` copies ours in, `grads` maps the torch gradients back to our names.
"""
from __future__ import annotations

import numpy as np
import torch
import transformers

# our name -> (HF parameter path, how our array becomes it)
_SHARED = {"shared.w_gate": "gate_proj.weight", "shared.w_up": "up_proj.weight",
           "shared.w_down": "down_proj.weight"}


def hf_block(family: str, moe, c: int, experts: str = "eager") -> torch.nn.Module:
    """The HF block of `family` ("mixtral", "qwen3_moe", "deepseek_v3", "qwen2_moe") with our
    MoEConfig's sizes. experts: transformers' experts implementation, "eager" (a loop over the
    experts, as ours) or "grouped_mm" (one grouped kernel; needs 16-byte-aligned widths)."""
    common = dict(hidden_size=c, num_experts_per_tok=moe.experts_per_token,
                  experts_implementation=experts)
    if family == "mixtral":
        config = transformers.MixtralConfig(intermediate_size=moe.expert_d_ff,
                                            num_local_experts=moe.n_experts, **common)
        return transformers.models.mixtral.modeling_mixtral.MixtralSparseMoeBlock(config)
    if family == "qwen3_moe":
        config = transformers.Qwen3MoeConfig(moe_intermediate_size=moe.expert_d_ff,
                                             num_experts=moe.n_experts,
                                             norm_topk_prob=moe.norm_topk_prob, **common)
        return transformers.models.qwen3_moe.modeling_qwen3_moe.Qwen3MoeSparseMoeBlock(config)
    if family == "deepseek_v3":
        config = transformers.DeepseekV3Config(
            moe_intermediate_size=moe.expert_d_ff, n_routed_experts=moe.n_experts,
            n_shared_experts=moe.shared_d_ff // moe.expert_d_ff, n_group=moe.n_group,
            topk_group=moe.topk_group, routed_scaling_factor=moe.routed_scaling_factor,
            norm_topk_prob=moe.norm_topk_prob, **common)
        return transformers.models.deepseek_v3.modeling_deepseek_v3.DeepseekV3MoE(config)
    config = transformers.Qwen2MoeConfig(moe_intermediate_size=moe.expert_d_ff,
                                         shared_expert_intermediate_size=moe.shared_d_ff,
                                         num_experts=moe.n_experts,
                                         norm_topk_prob=moe.norm_topk_prob, **common)
    return transformers.models.qwen2_moe.modeling_qwen2_moe.Qwen2MoeSparseMoeBlock(config)


def _shared_module(block):
    return getattr(block, "shared_experts", None) or getattr(block, "shared_expert", None)


def load(block: torch.nn.Module, params: dict) -> None:
    """Copy our params (block-local names, float32) into the HF block."""
    t = torch.tensor
    with torch.no_grad():
        block.gate.weight.copy_(t(params["router"].T))                       # (E, C)
        if "router_bias" in params:
            block.gate.e_score_correction_bias.copy_(t(params["router_bias"]))
        gate_up = np.concatenate([params["experts.w_gate"], params["experts.w_up"]], axis=2)
        block.experts.gate_up_proj.copy_(t(gate_up.transpose(0, 2, 1)))      # (E, 2 F_e, C)
        block.experts.down_proj.copy_(t(params["experts.w_down"].transpose(0, 2, 1)))
        shared = _shared_module(block)
        for ours, theirs in _SHARED.items():
            if ours in params:
                shared.get_parameter(theirs).copy_(t(params[ours].T))
        if "shared_gate" in params:
            block.shared_expert_gate.weight.copy_(t(params["shared_gate"].T))  # (1, C)


def grads(block: torch.nn.Module, params: dict) -> dict:
    """The HF block's gradients under our names and layouts (router_bias: not a parameter)."""
    f_e = params["experts.w_up"].shape[2]
    gate_up = block.experts.gate_up_proj.grad.numpy().transpose(0, 2, 1)     # (E, C, 2 F_e)
    out = {"router": block.gate.weight.grad.numpy().T,
           "experts.w_gate": gate_up[..., :f_e], "experts.w_up": gate_up[..., f_e:],
           "experts.w_down": block.experts.down_proj.grad.numpy().transpose(0, 2, 1)}
    shared = _shared_module(block)
    for ours, theirs in _SHARED.items():
        if ours in params:
            out[ours] = shared.get_parameter(theirs).grad.numpy().T
    if "shared_gate" in params:
        out["shared_gate"] = block.shared_expert_gate.weight.grad.numpy().T
    return out


def run(block: torch.nn.Module, params: dict, x: np.ndarray, dy: np.ndarray):
    """Forward x (B, T, C), backward dy: (y, {our names and "x": grads})."""
    load(block, params)
    x_t = torch.tensor(x, requires_grad=True)
    y = block(x_t)
    y.backward(torch.tensor(dy))
    return y.detach().numpy(), {**grads(block, params), "x": x_t.grad.numpy()}
