"""Checks of a run's settings before anything is written or allocated.

    check_train_config     types and ranges of every training setting (no nan lr, no negative
                           clip, no float batch size)
    train_config_from_dict a checkpoint's saved settings, checked the same way; the one reader
                           that folds a run saved before objectives had settings (their fields
                           flat in train_config) into objective_settings
    check_training_memory  refuse a model whose training would not fit this machine's memory,
                           saying how much it would need
    resumed_config         a resume's settings: the saved ones, with the given ones that are safe
    check_model_flags      model flags given on a resume must match the checkpoint's model
"""
from __future__ import annotations

import dataclasses
import math

from glassformer.errors import GlassformerError
from glassformer.memory import human_bytes, physical_memory_bytes
from glassformer.models.family import check_field_values
from glassformer.models.registry import family as family_of
from glassformer.train.loop import TrainConfig, flag_of
from glassformer.train.objectives import objective_of
from glassformer.train.objectives.settings import settings_from_dict

# Settings a resume may change: where the run ends, how often it evaluates, the end of the lr
# schedule, how many cores share a batch. None changes the model, the batches or the steps
# already taken.
SAFE_ON_RESUME = ("max_iters", "eval_interval", "lr_decay_iters", "min_lr", "workers")
# Rough floats kept per token and layer while training (activations saved for backward):
# residual, norms, q/k/v, attention output, MLP up and activation, ~16 C in all.
ACTIVATION_FLOATS_PER_CHANNEL = 16
FLOAT_BYTES = 4


def check_train_config(cfg: TrainConfig) -> None:
    """Types and ranges of every training setting; raises a one-line GlassformerError."""
    loop_fields = {key: value for key, value in dataclasses.asdict(cfg).items()
                   if key != "objective_settings"}   # the settings checked themselves
    check_field_values(TrainConfig, loop_fields, name_of=flag_of)
    cfg.objective_settings.check_run(cfg)
    for name in ("lr", "min_lr", "weight_decay", "grad_clip"):
        if getattr(cfg, name) < 0:
            raise GlassformerError(f"{flag_of(name)} must be >= 0, got {getattr(cfg, name)}")
    for name in ("beta1", "beta2"):
        if not 0.0 <= getattr(cfg, name) < 1.0:
            raise GlassformerError(f"{flag_of(name)} must be in [0, 1), got "
                                   f"{getattr(cfg, name)}")
    if cfg.schedule == "cosine" and cfg.lr_decay_iters <= cfg.warmup_iters:
        raise GlassformerError(f"--lr-decay-iters {cfg.lr_decay_iters} must be larger than "
                               f"--warmup-iters {cfg.warmup_iters}: the cosine decay starts "
                               f"where the warmup ends; give --warmup-iters "
                               f"{cfg.lr_decay_iters // 10} (or a later --lr-decay-iters, which "
                               "finetune sets to --max-iters)")


# The objectives' settings as runs saved them before each objective owned its own (at 0db0b93,
# flat in train_config); train_config_from_dict folds them into objective_settings
FLAT_SETTINGS = ("beta", "sft_weight", "num_generations", "max_completion_tokens",
                 "temperature", "epsilon", "epsilon_high", "loss_type", "scale_rewards", "reward",
                 "reward_weights", "balance", "router_aux_coef", "mask_prob", "ref")


def train_config_from_dict(data: dict) -> TrainConfig:
    """A TrainConfig from a checkpoint's state.json, checked like a config.json. A run saved
    with its objective's settings flat among the loop's (FLAT_SETTINGS) is folded: the fields
    its objective's settings have are kept (None, which meant "the default", left out), the
    other objectives' defaults dropped."""
    data = dict(data)
    objective = data.get("objective", TrainConfig.objective)
    check_field_values(TrainConfig, {"objective": objective})
    settings_class = objective_of(objective).settings
    if "objective_settings" in data:
        settings = data.pop("objective_settings") or {}
    else:
        own = {field.name for field in dataclasses.fields(settings_class)}
        flat = {key: data.pop(key) for key in FLAT_SETTINGS if key in data}
        settings = {key: value for key, value in flat.items()
                    if key in own and value is not None}
    known = {field.name for field in dataclasses.fields(TrainConfig)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise GlassformerError(f"the checkpoint's train_config has unknown keys {unknown}")
    check_field_values(TrainConfig, data)
    if not isinstance(settings, dict):
        raise GlassformerError("the checkpoint's objective_settings is not a JSON object")
    cfg = TrainConfig(**data, objective_settings=settings_from_dict(
        settings_class, settings, what="the checkpoint's objective_settings"))
    check_train_config(cfg)
    return cfg


def training_memory_bytes(model_cfg, train_cfg: TrainConfig) -> tuple[int, int]:
    """(bytes, parameter count): a rough lower bound of the memory training needs.

    Parameters, gradients and AdamW's two moments (4 copies), plus the activations of one
    micro-batch: ~16 C floats per token and layer, the attention weights (H T per token and
    layer), and the logits with their softmax (2 V per token).
    """
    shapes = family_of(model_cfg.to_dict()["arch"]).param_shapes(model_cfg)
    n_params = sum(math.prod(shape) for shape in shapes.values())
    tokens = train_cfg.batch_size * train_cfg.block_size                # B T
    per_layer = (ACTIVATION_FLOATS_PER_CHANNEL * model_cfg.d_model
                 + model_cfg.n_head * train_cfg.block_size)
    activations = tokens * (model_cfg.n_layer * per_layer + 2 * model_cfg.vocab_size)
    return FLOAT_BYTES * (4 * n_params + activations), n_params


def check_training_memory(model_cfg, train_cfg: TrainConfig) -> None:
    """Refuse a model that could not be trained in this machine's memory, before allocating."""
    need, n_params = training_memory_bytes(model_cfg, train_cfg)
    have = physical_memory_bytes()
    if have is not None and need > have:
        raise GlassformerError(
            f"this model ({n_params:,} parameters: n_layer={model_cfg.n_layer}, "
            f"d_model={model_cfg.d_model}, vocab {model_cfg.vocab_size}) would need about "
            f"{human_bytes(need)} of memory to train at batch {train_cfg.batch_size} x block "
            f"{train_cfg.block_size}; this machine has {human_bytes(have)}")


def resumed_config(saved: TrainConfig, given: dict) -> tuple[TrainConfig, dict]:
    """(the config a resume trains with, {name: [saved, given]} of the settings it changes).

    `given` holds only the settings the user gave explicitly: the loop's, and the objective's
    own (train/objectives/settings.py), none of which is safe to change. One that differs from
    the saved value is taken if it is in SAFE_ON_RESUME and refused otherwise.
    """
    changed = {}
    loop_fields = {field.name for field in dataclasses.fields(TrainConfig)}
    for name, value in given.items():
        old = getattr(saved if name in loop_fields else saved.objective_settings, name)
        if value == old:
            continue
        flag = "--" + name.replace("_", "-")
        if name not in SAFE_ON_RESUME:
            raise GlassformerError(
                f"--resume continues the run as it was saved: it has {flag} {old}, got {flag} "
                f"{value}; drop the flag, or start a new run with another --out")
        changed[name] = [old, value]
    return dataclasses.replace(saved, **{key: value for key, value in given.items()
                                         if key in loop_fields}), changed


def check_model_flags(saved: dict, given: dict) -> None:
    """Refuse model settings given on --resume that differ from the checkpoint's model."""
    for name, value in given.items():
        old = saved.get(name)
        if name == "n_kv_head" and old is None:
            old = saved.get("n_head")  # None: one KV head per query head
        if value != old:
            flag = "--" + name.replace("_", "-")
            shown = "absent" if name not in saved else old
            raise GlassformerError(
                f"--resume keeps the run's model: its {name} is {shown}, got {flag} {value}; "
                "drop the flag, or start a new run with another --out")
