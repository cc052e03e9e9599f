"""LoRA adapters in PEFT's format: make, save, load and merge them (the math: ops/lora.py).

The Python API (what `glassformer finetune` calls):

    from glassformer.io.peft import (LoraConfig, init_adapters, adapter_constants, save_adapter,
                                     load_adapter, merge_adapters)
    model = load_model("smollm2")
    lora_cfg = LoraConfig(r=8, alpha=16, dropout=0.05, targets=("q_proj", "v_proj"),
                          base_model="HuggingFaceTB/SmolLM2-135M-Instruct")
    adapters = init_adapters(model, lora_cfg, rng)     # {"blocks.0.attn.wq.lora_A": (C, r), ...}
    frozen = {**model.params, **adapter_constants(adapters, lora_cfg)}
    # train: params=adapters (the optimizer's), frozen=frozen (read by the forward, never updated);
    # family.forward({**frozen, **adapters}, ...) sees the adapters and runs the base frozen
    save_adapter(out_dir, model, adapters, lora_cfg)   # the two files PEFT reads
    adapters, lora_cfg = load_adapter(out_dir, model)  # A, B, constants; any PEFT LoRA folder
    merged = merge_adapters(model, adapters)           # a plain Model, W' = W + s A B
    merged = merge_adapters(model, trained, lora_cfg)  # a run's A and B: the config gives s
    # glassformer.load_pretrained(BASE, adapter=DIR) is load_adapter + merge_adapters

Targets are PEFT's module names, matched as PEFT matches them: a module is adapted when its name
is the target or ends with "." + target (a string target is a regular expression that must match
the whole name). The modules are the linear layers of the blocks, named by io/hf/<family>.py's
tables: q_proj, k_proj, v_proj, o_proj, gate_proj, up_proj, down_proj (LLaMA, Qwen2, Mistral);
c_attn, c_proj, c_fc (GPT-2; c_attn is fused q|k|v, so its adapter is one "attn.wqkv" adapter);
query, key, value, dense (BERT). "all-linear" (PEFT's name) adapts them all, whatever the family
calls them (adapter_config.json then lists them). A target that names no module is refused in
one line.

The files. adapter_config.json holds peft_type "LORA", r, lora_alpha, lora_dropout,
target_modules, bias "none", task_type, base_model_name_or_path, use_rslora, fan_in_fan_out,
and the rest of PEFT's LoraConfig fields at their defaults. adapter_model.safetensors holds, per
adapted module, "base_model.model.<HF module>.lora_A.weight" (r, in) and "....lora_B.weight"
(out, r): torch's layout, the transpose of ours (io transposes once, here). Its metadata carries a
probe of the base model (64 values of one adapted weight), so that loading onto an unrelated model
with the same shapes is refused too (the same base in another precision, a 4-bit GGUF included,
passes: the samples are compared by cosine); PEFT ignores it.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from glassformer.blocks.lora import (LORA_A, LORA_B, adapted_weight, adapter_constants as
                                     _constants, adapter_name, adapter_of, is_adapter_key)
from glassformer.errors import CheckpointError, GlassformerError
from glassformer.io.hf.registry import hf_family
from glassformer.json_object import read_json_object
from glassformer.io.lora_modules import (ALL_LINEAR, family_targets, is_targeted, module_list,
                                         modules, select_modules, sizes)
from glassformer.io.safetensors import (load_safetensors, read_safetensors_header,
                                        save_safetensors, write_atomically)
from glassformer.models.family import CAUSAL, ENCODER
from glassformer.models.model import Model
from glassformer.models.registry import family
from glassformer.ops.lora import init_lora, lora_merge, lora_scale
from glassformer.ops.quant import is_quantized

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
PEFT_PREFIX = "base_model.model."
PROBE_KEY = "glassformer_base_probe"   # safetensors metadata: a few values of the base model
PROBE_VALUES = 64
# The probes of one base read from f32, bf16 or a 4-bit GGUF point the same way (cosine > 0.99);
# an unrelated model's are near orthogonal (cosine ~ 0 +- 1/sqrt(64)).
PROBE_MIN_COSINE = 0.9
TASK_TYPES = {CAUSAL: "CAUSAL_LM", ENCODER: "FEATURE_EXTRACTION"}   # by Family.kind


@dataclass(frozen=True)
class LoraConfig:
    """One adapter set's settings (PEFT's LoraConfig, the fields glassformer uses)."""
    r: int = 8                                  # rank of A (C_in, r) and B (r, C_out)
    alpha: float = 16.0                         # s = alpha / r (rsLoRA: alpha / sqrt(r))
    dropout: float = 0.0                        # on the adapter's input, training only
    targets: tuple[str, ...] | str = ("q_proj", "v_proj")   # PEFT module names, one regex, or
                                                            # ALL_LINEAR (every linear layer)
    rslora: bool = False                        # PEFT's use_rslora
    base_model: str = ""                        # base_model_name_or_path, as written to the file

    def __post_init__(self):
        lora_scale(self.alpha, self.r, rslora=self.rslora)  # checks r and alpha
        if not 0.0 <= float(self.dropout) < 1.0:
            raise GlassformerError(f"LoRA dropout must be in [0, 1), got {self.dropout}")
        if not self.targets:
            raise GlassformerError("LoRA needs at least one target module")

    @property
    def scale(self) -> float:
        return lora_scale(self.alpha, self.r, rslora=self.rslora)


# ---------------------------------------------------------------- making and merging

def init_adapters(model: Model, lora_cfg: LoraConfig, rng: np.random.Generator) -> dict:
    """Fresh trainable adapters (A uniform ±1/sqrt(C_in), B zeros) on every targeted module, in
    the model's layer order: {"blocks.{i}.attn.wq.lora_A": (C_in, r), ".lora_B": (r, C_out)}."""
    chosen = select_modules(model, lora_cfg.targets)
    check_rank(model, chosen, lora_cfg.r)
    adapters = {}
    for module in chosen:
        c_in, c_out = sizes(model.params, module)
        a, b = init_lora(c_in, c_out, lora_cfg.r, rng)
        adapters[adapter_name(module.weight, LORA_A)] = a
        adapters[adapter_name(module.weight, LORA_B)] = b
    return adapters


def check_rank(model: Model, chosen: list, r: int) -> None:
    """Issue 32: r at most min(C_in, C_out) of every target, checked before anything is
    allocated (a rank past it adds no expressive power, only memory: A B has rank <= min).
    The refusal names the narrowest target, so the value it advises fits them all."""
    narrowest = min(chosen, key=lambda module: min(sizes(model.params, module)))
    c_in, c_out = sizes(model.params, narrowest)
    if r > min(c_in, c_out):
        raise GlassformerError(f"--lora-r {r} is larger than {narrowest.hf_module} allows "
                               f"({c_in} in, {c_out} out): LoRA's rank is at most the smaller, "
                               f"so choose --lora-r {min(c_in, c_out)} or less")


def adapter_constants(adapters: dict, lora_cfg: LoraConfig) -> dict:
    """The frozen constants (scale, dropout) of each adapter in `adapters`: pass them with the
    base weights as `frozen` (a LoRA run) or merge them with the adapters (inference)."""
    constants = {}
    for key in adapters:
        if key.endswith("." + LORA_A):
            constants.update(_constants(adapted_weight(key), lora_cfg.scale, lora_cfg.dropout))
    return constants


def merge_adapters(model: Model, adapters: dict, lora_cfg: LoraConfig | None = None) -> Model:
    """A new Model whose adapted weights are W + s A B; the model given is left as it was.

    adapters: A, B and their constants, as load_adapter returns them; or A and B only (a run's
    trained params) with the lora_cfg that gives their scale."""
    if lora_cfg is not None:
        adapters = {**adapter_constants(adapters, lora_cfg), **adapters}
    missing = [k for k in adapters if k.endswith("." + LORA_A)
               and adapter_name(adapted_weight(k), "lora_scale") not in adapters]
    if missing:
        raise GlassformerError(f"adapter {missing[0]!r} has no scale: pass the LoraConfig "
                               "(merge_adapters(model, adapters, lora_cfg))")
    params = dict(model.params)
    for key in adapters:
        if not key.endswith("." + LORA_A):
            continue
        weight = adapted_weight(key)
        adapter = adapter_of(adapters, weight)
        parts = _parts_of(weight)
        # a quantized base weight (ops/quant/) is merged in float32: W + s A B is off its grid
        params.update({p: params[p].dequantize() for p in parts if is_quantized(params[p])})
        joined = np.concatenate([params[p] for p in parts], axis=1) if len(parts) > 1 \
            else params[parts[0]]                                           # (C_in, C_out)
        merged = lora_merge(joined, adapter.a, adapter.b, adapter.scale)
        widths = np.cumsum([params[p].shape[1] for p in parts])[:-1]
        for part, piece in zip(parts, np.split(merged, widths, axis=1)):
            # note: keep the base weight's memory order (a checkpoint's transposed weights are
            # column-major, the order decoding's matrix-vector products stream fastest)
            fortran = params[part].flags.f_contiguous and not params[part].flags.c_contiguous
            params[part] = np.asfortranarray(piece) if fortran else np.ascontiguousarray(piece)
    return Model(model.cfg, params, model.tokenizer)


def _parts_of(weight: str) -> tuple[str, ...]:
    """'blocks.3.attn.wqkv' -> its three base weights; any other weight is its own part."""
    if weight.endswith(".attn.wqkv"):
        stem = weight[:-len("wqkv")]
        return (stem + "wq", stem + "wk", stem + "wv")
    return (weight,)


# ---------------------------------------------------------------- the files

def peft_config(model: Model, lora_cfg: LoraConfig) -> dict:
    """adapter_config.json's contents, as PEFT writes them for this LoRA."""
    targets = lora_cfg.targets
    if targets == ALL_LINEAR:   # written expanded, as PEFT writes it
        targets = family_targets(model.arch, model.cfg)
    targets = targets if isinstance(targets, str) else sorted(targets)
    return {
        "alpha_pattern": {}, "auto_mapping": None,
        "base_model_name_or_path": lora_cfg.base_model or None,
        "bias": "none", "inference_mode": True,
        "fan_in_fan_out": hf_family(model.arch).conv1d,   # weights stored (in, out): Conv1D
        "init_lora_weights": True, "layers_pattern": None, "layers_to_transform": None,
        "lora_alpha": lora_cfg.alpha, "lora_dropout": lora_cfg.dropout,
        "modules_to_save": None, "peft_type": "LORA", "r": lora_cfg.r, "rank_pattern": {},
        "revision": None, "target_modules": targets,
        "task_type": TASK_TYPES[family(model.arch).kind],
        "use_dora": False, "use_rslora": lora_cfg.rslora,
    }


def save_adapter(directory, model: Model, adapters: dict, lora_cfg: LoraConfig) -> Path:
    """Write adapter_config.json and adapter_model.safetensors (each atomically) that
    peft.PeftModel.from_pretrained(base, directory) loads. adapters: at least A and B."""
    by_weight = {m.weight: m for m in modules(model.arch, model.cfg)}
    tensors = {}
    for key, value in adapters.items():
        if not is_adapter_key(key):
            continue
        weight, part = adapted_weight(key), key.rsplit(".", 1)[1]
        if weight not in by_weight:
            raise GlassformerError(f"adapter {key!r} sits on no linear module of this model")
        file_key = f"{PEFT_PREFIX}{by_weight[weight].hf_module}.{part}.weight"
        tensors[file_key] = np.ascontiguousarray(value.T, dtype=np.float32)  # -> torch layout
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    metadata = {"format": "pt", PROBE_KEY: json.dumps(_probe(model.params, adapters))}
    save_safetensors(folder / ADAPTER_WEIGHTS, tensors, metadata=metadata)
    text = json.dumps(peft_config(model, lora_cfg), indent=2, sort_keys=True) + "\n"
    write_atomically(folder / ADAPTER_CONFIG, lambda f: f.write(text.encode("utf-8")))
    return folder


def _probe(params: dict, adapters: dict) -> dict:
    """A few values of the first adapted base weight: {"weight": name, "values": [...]}."""
    first = next(adapted_weight(k) for k in adapters if is_adapter_key(k))
    part = _parts_of(first)[0]
    values = _probe_values(params[part], PROBE_VALUES)
    return {"weight": part, "values": [float(v) for v in values]}


def _probe_values(weight, n: int) -> np.ndarray:
    """weight[0, :n] as float64 (of a quantized weight only the first n stored rows widened)."""
    if is_quantized(weight):
        weight = weight.first_rows(n).dequantize()
    return np.asarray(weight[0, :n], np.float64)


def load_adapter(directory, model: Model) -> tuple[dict, LoraConfig]:
    """A PEFT LoRA folder (written by save_adapter or by peft) for this model: (adapters, lora_cfg),
    adapters holding A (C_in, r), B (r, C_out) and the constants of every adapted weight.

    Checked before anything is kept: the config (LoRA, bias "none", no DoRA, nothing else
    trained), every tensor's module and shape against this model, and the base-model probe."""
    folder = Path(directory)
    config = _read_adapter_config(folder)
    path = folder / ADAPTER_WEIGHTS
    if not path.is_file():
        hint = " (adapter_model.bin is a pickle, never loaded)" if (
            folder / "adapter_model.bin").is_file() else ""
        raise CheckpointError(f"{folder} has no {ADAPTER_WEIGHTS}{hint}")
    header = read_safetensors_header(path)
    shapes = {key: info.shape for key, info in header.tensors.items()}
    placed = _place(path, model, shapes)
    _check_config_agrees(folder, config, placed, shapes)
    _check_probe(folder, model, header.metadata or {}, config)
    tensors = load_safetensors(path)
    lora_cfg = _lora_config(config)
    adapters = {}
    for key, (module, part) in placed.items():
        adapters[adapter_name(module.weight, part)] = np.ascontiguousarray(
            tensors[key].T, dtype=np.float32)                    # torch layout -> ours
        if part == LORA_A:
            r = tensors[key].shape[0]
            alpha = _pattern_value(config.get("alpha_pattern") or {}, module.hf_module,
                                   lora_cfg.alpha)
            scale = lora_scale(alpha, r, rslora=lora_cfg.rslora)
            adapters.update(_constants(module.weight, scale, lora_cfg.dropout))
    return adapters, lora_cfg


def not_a_model(folder: Path) -> str | None:
    """The one-line error for a model path that is an adapter folder (a LoRA run), else None."""
    if not (folder / ADAPTER_CONFIG).is_file() or (folder / "config.json").is_file():
        return None
    try:
        base = json.loads((folder / ADAPTER_CONFIG).read_text(encoding="utf-8"))
        base = base.get("base_model_name_or_path") or "its base model"
    except (UnicodeDecodeError, ValueError, AttributeError):
        base = "its base model"
    return (f"{folder} is a LoRA adapter, not a model: load it on {base}, as --model BASE "
            f"--adapter {folder} (glassformer.load_pretrained(BASE, adapter=...))")


def _read_adapter_config(folder: Path) -> dict:
    path = folder / ADAPTER_CONFIG
    if not path.is_file():
        raise CheckpointError(f"{folder} has no {ADAPTER_CONFIG}; an adapter folder holds "
                              f"{ADAPTER_CONFIG} and {ADAPTER_WEIGHTS}")
    config = read_json_object(path, CheckpointError)
    refusals = [
        (config.get("peft_type") != "LORA",
         f"peft_type is {config.get('peft_type')!r}; glassformer loads LoRA adapters only"),
        (config.get("bias", "none") != "none",
         f"bias is {config.get('bias')!r}: the adapter trains biases too; glassformer loads "
         "bias 'none' only"),
        (bool(config.get("use_dora")), "use_dora is true; glassformer loads plain LoRA only"),
        (bool(config.get("modules_to_save")),
         f"modules_to_save {config.get('modules_to_save')} trains whole modules besides the "
         "adapters; glassformer loads adapters only"),
    ]
    for refused, why in refusals:
        if refused:
            raise CheckpointError(f"{path}: {why}")
    return config


def _lora_config(config: dict) -> LoraConfig:
    targets = config.get("target_modules") or ()
    return LoraConfig(r=int(config.get("r", 8)), alpha=float(config.get("lora_alpha", 8)),
                      dropout=float(config.get("lora_dropout") or 0.0),
                      targets=targets if isinstance(targets, str) else tuple(targets),
                      rslora=bool(config.get("use_rslora", False)),
                      base_model=config.get("base_model_name_or_path") or "")


def _pattern_value(pattern: dict, module: str, default: float) -> float:
    """PEFT's alpha_pattern: the value of the first key the module's name ends with."""
    for key, value in pattern.items():
        if re.match(rf"(.*\.)?{key}$", module):
            return float(value)
    return float(default)


def _place(path: Path, model: Model, shapes: dict) -> dict:
    """{file key: (module, "lora_A" or "lora_B")} for every tensor, each checked against the model:
    its module exists and its shape is (r, C_in) or (C_out, r)."""
    names = hf_family(model.arch).names
    by_module = {_strip(m.hf_module, names.prefix): m for m in modules(model.arch, model.cfg)}
    placed, ranks = {}, {}
    pattern = re.compile(rf"{re.escape(PEFT_PREFIX)}(.+)\.(lora_A|lora_B)\.weight")
    for key, shape in shapes.items():
        found = pattern.fullmatch(key)
        if found is None:
            raise CheckpointError(f"{path}: tensor {key!r} is not a LoRA A or B weight "
                                  f"({PEFT_PREFIX}<module>.lora_A.weight)")
        module = by_module.get(_strip(found.group(1), names.prefix))
        if module is None:
            raise CheckpointError(f"{path}: tensor {key!r} adapts module {found.group(1)!r}, "
                                  f"which this {model.arch} model lacks; "
                                  f"{module_list(list(by_module.values()))}")
        c_in, c_out = sizes(model.params, module)
        part = found.group(2)
        r = shape[0] if part == LORA_A else shape[-1]
        want = (r, c_in) if part == LORA_A else (c_out, r)
        if tuple(shape) != want or ranks.setdefault(module.weight, r) != r:
            raise CheckpointError(f"{path}: tensor {key!r} has shape {tuple(shape)}, but this "
                                  f"model's {found.group(1)} needs {want} "
                                  f"(the adapter was made for another base model)")
        placed[key] = (module, part)
    parts = {}
    for module, part in placed.values():
        parts.setdefault(module.weight, set()).add(part)
    for weight, have in parts.items():
        if have != {LORA_A, LORA_B}:
            raise CheckpointError(f"{path}: the adapter on {weight} has {sorted(have)} only; "
                                  "it needs both lora_A and lora_B")
    if not placed:
        raise CheckpointError(f"{path} holds no LoRA tensors")
    return placed


def _check_config_agrees(folder: Path, config: dict, placed: dict, shapes: dict) -> None:
    """Issue 32: adapter_config.json's r (or rank_pattern) and target_modules must describe the
    tensors; a config that disagrees is refused naming both values."""
    targets = config.get("target_modules") or ()
    adapted = {module.hf_module: shapes[key][0]
               for key, (module, part) in placed.items() if part == LORA_A}
    for module, rank in adapted.items():
        said = int(_pattern_value(config.get("rank_pattern") or {}, module, config.get("r", 8)))
        if said != rank:
            raise CheckpointError(f"{folder / ADAPTER_CONFIG} says r {said}, but the tensors of "
                                  f"{module} have rank {rank}")
        if targets and not is_targeted(targets, module):
            raise CheckpointError(f"{folder / ADAPTER_CONFIG} has target_modules {targets}, but "
                                  f"the tensors adapt {module}, which they do not name")
    if isinstance(targets, list) and not config.get("layers_to_transform"):
        unused = [entry for entry in targets if not any(is_targeted([entry], m) for m in adapted)]
        if unused:
            raise CheckpointError(f"{folder / ADAPTER_CONFIG} has target_modules {targets}, but "
                                  f"no tensor adapts {unused[0]}")


def _strip(module: str, prefix: str) -> str:
    return module[len(prefix):] if module.startswith(prefix) else module


def _check_probe(folder: Path, model: Model, metadata: dict, config: dict) -> None:
    """When the file carries glassformer's probe of its base, this model must agree with it."""
    if PROBE_KEY not in metadata:
        return  # written by peft: the shapes were the check
    try:
        probe = json.loads(metadata[PROBE_KEY])
        ours = _probe_values(model.params[probe["weight"]], len(probe["values"]))
    except (ValueError, KeyError, TypeError, IndexError):
        raise CheckpointError(f"{folder / ADAPTER_WEIGHTS}: unreadable {PROBE_KEY} metadata") \
            from None
    theirs = np.asarray(probe["values"], np.float64)
    norms = float(np.linalg.norm(ours) * np.linalg.norm(theirs))
    cosine = float(ours @ theirs) / norms if ours.shape == theirs.shape and norms > 0.0 else 0.0
    if cosine < PROBE_MIN_COSINE:
        base = config.get("base_model_name_or_path") or "another model"
        raise CheckpointError(f"{folder}: this adapter was trained on {base}, whose weights "
                              f"differ from this model's ({probe['weight']}: cosine "
                              f"{cosine:.2f} between samples, expected >= {PROBE_MIN_COSINE})")
