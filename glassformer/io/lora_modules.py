"""The linear layers a LoRA adapter can sit on, named as Hugging Face and PEFT name them.

Each module pairs our adapted weight ("blocks.3.attn.wq", or "blocks.3.attn.wqkv" for GPT-2's
fused c_attn) with its HF module name in the task model ("model.layers.3.self_attn.q_proj"), read
off the rename tables (io/hf/<family>.py), and PEFT's target rule picks among them (io/peft.py
uses both).

The family's default targets come from the same tables: ALL_LINEAR ("all-linear", PEFT's own
name for it) adapts every one of these modules, whatever the family calls them, so one default
fits every family (family_targets lists the names it stands for):

    LLaMA, Qwen2, Mistral   q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj
    GPT-2                   c_attn, c_proj, c_fc
    BERT                    query, key, value, dense
"""
from __future__ import annotations

import re
from typing import NamedTuple

from glassformer.errors import GlassformerError
from glassformer.io.hf.records import Split, file_prefix
from glassformer.io.hf.registry import hf_family
from glassformer.models.model import Model

# Our block-local weights that can carry an adapter (attention's and the MLP's linear layers).
ADAPTABLE = ("attn.wq", "attn.wk", "attn.wv", "attn.wo", "mlp.w_gate", "mlp.w_up", "mlp.w_down")
# The target that names every adaptable module (PEFT's target_modules="all-linear", which PEFT
# expands to the model's linear layers but the output head; here: the blocks' linear layers).
ALL_LINEAR = "all-linear"


class Module(NamedTuple):
    """One linear layer an adapter can sit on."""
    weight: str          # our adapted weight: "blocks.3.attn.wq", or "blocks.3.attn.wqkv" (fused)
    parts: tuple         # the base weights it covers, joined on the output axis
    hf_module: str       # HF module name in the task model: "model.layers.3.self_attn.q_proj"


def modules(arch: str, cfg) -> list[Module]:
    """Every adaptable linear layer of this model, named as HF's task model names it."""
    hf = hf_family(arch)
    prefix = file_prefix(hf, cfg)   # none in a bare-model file (BertModel)
    found = []
    for i in range(cfg.n_layer):
        for row in hf.names.layer:
            ours = row.ours if isinstance(row, Split) else (row.ours,)
            if not row.theirs.endswith(".weight") or not set(ours) <= set(ADAPTABLE):
                continue
            module = prefix + row.theirs.format(i=i)[:-len(".weight")]
            parts = tuple(f"blocks.{i}.{name}" for name in ours)
            weight = parts[0] if len(parts) == 1 else f"blocks.{i}.attn.wqkv"
            found.append(Module(weight, parts, module))
    return found


def family_targets(arch: str, cfg) -> tuple[str, ...]:
    """The PEFT names of every adaptable module of this model, once each, in layer order: what
    ALL_LINEAR stands for (and what adapter_config.json lists for it, as PEFT writes it)."""
    return tuple(dict.fromkeys(m.hf_module.rsplit(".", 1)[-1] for m in modules(arch, cfg)))


def _named(entry: str, module: str) -> bool:
    """PEFT's rule for a list entry: the module's name is the entry or ends in "." + entry."""
    return module == entry or module.endswith("." + entry)


def is_targeted(targets, module: str) -> bool:
    """Whether PEFT's target_modules (a list of names, ALL_LINEAR, or one regex) name this HF
    module (one of modules()'s)."""
    if targets == ALL_LINEAR:
        return True
    if isinstance(targets, str):
        return re.fullmatch(targets, module) is not None
    return any(_named(entry, module) for entry in targets)


def select_modules(model: Model, targets) -> list[Module]:
    """The modules the targets name (a list of names, ALL_LINEAR, or one regex for the whole
    name); a target that names no module is an error."""
    every = modules(model.arch, model.cfg)
    if targets == ALL_LINEAR:
        if not every:
            raise GlassformerError(f"this {model.arch} model has no linear module an adapter "
                                   "can sit on")
        return every
    if isinstance(targets, str):
        chosen = [m for m in every if re.fullmatch(targets, m.hf_module)]
        if not chosen:
            raise GlassformerError(f"target regex {targets!r} matches no module of this "
                                   f"{model.arch} model; {module_list(every)}")
        return chosen
    for entry in targets:
        if not any(_named(entry, m.hf_module) for m in every):
            raise GlassformerError(f"target {entry!r} names no module of this "
                                   f"{model.arch} model; {module_list(every)}")
    return [m for m in every if any(_named(entry, m.hf_module) for entry in targets)]


def module_list(every: list[Module]) -> str:
    short = sorted({m.hf_module.rsplit(".", 1)[-1] for m in every})
    return "its linear modules are " + ", ".join(short)


def sizes(params: dict, module: Module) -> tuple[int, int]:
    """(C_in, C_out) of the module's (joined) weight."""
    c_in = params[module.parts[0]].shape[0]
    return c_in, sum(params[part].shape[1] for part in module.parts)
