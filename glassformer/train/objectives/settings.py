"""An objective's own settings: one frozen dataclass beside its loss, each field with its default
and its one-line help (TRL's DPOConfig / GRPOConfig, one config per trainer).

    @dataclass(frozen=True)
    class DPOSettings(Settings):
        beta: float = setting(0.1, "strength of the reference (TRL's default)")
        ...
        def __post_init__(self):        # the settings' own checks, one line each
            ...

What reads them:
    TrainConfig.objective_settings   the run's settings of its objective (train/loop.py): saved
                                     as a dict beside the loop's fields, read back with
                                     settings_from_dict
    cli/settings_flags.py            one flag per field (--sft-weight for sft_weight), the help
                                     from `setting`; a flag of another objective is refused
    Settings.check_run(train_cfg)    what they must agree on with the loop's settings (GRPO has
                                     no --grad-accum), called once at a run's start
    Settings.needs_reference         whether the run keeps a reference model (DPO always; GRPO
                                     only for its KL term), and `reference` which one
    Settings.resolved(from_adapter)  a default made concrete at a new run's start (DPO's
                                     reference: the starting adapter when there is one)

An objective without settings has `NoSettings`.
"""
from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass

from glassformer.errors import GlassformerError, check_choice
from glassformer.models.family import check_field_values


def setting(default, help: str, *, choices: tuple | None = None):
    """A settings field: its default, the help its flag shows and, for a choice, what is allowed
    (checked by check_choices)."""
    return dataclasses.field(default=default, metadata={"help": help, "choices": choices})


def flag_of(name: str) -> str:
    """A setting's command-line flag: sft_weight -> --sft-weight, lr_decay_iters ->
    --lr-decay-iters (every training flag is spelled so: TrainConfig's in cli/common.py's
    TRAIN_FLAGS, an objective's in cli/settings_flags.py)."""
    return "--" + name.replace("_", "-")


@dataclass(frozen=True)
class Settings:
    """The base of every objective's settings (no fields of its own)."""

    def check_run(self, train_cfg) -> None:
        """Refuse, in one line, loop settings these cannot train with (none by default)."""

    @property
    def needs_reference(self) -> bool:
        """Whether the run keeps a frozen reference model beside the policy."""
        return False

    @property
    def reference(self) -> str:
        """Which reference (objectives/dpo.py's REFS): the model with its adapters switched off,
        unless the settings say otherwise."""
        return "base"

    def resolved(self, *, from_adapter: bool) -> "Settings":
        """The settings a new run saves, with any default that depends on how the run starts
        made concrete (from_adapter: it continues an adapter, finetune --adapter)."""
        return self

    def check_types_and_choices(self) -> None:
        """Every field's type (a number for a float, ...) and every choice, naming the flag; the
        __post_init__ of each subclass calls this first."""
        values = {field.name: getattr(self, field.name) for field in dataclasses.fields(self)}
        check_field_values(type(self), values, name_of=flag_of)
        for field in dataclasses.fields(self):
            choices = field.metadata.get("choices")
            value = getattr(self, field.name)
            if choices is not None and value is not None:
                check_choice(flag_of(field.name), value, choices)


@dataclass(frozen=True)
class NoSettings(Settings):
    """The settings of an objective that has none."""


def setting_fields(cls: type) -> list[dataclasses.Field]:
    """The settings fields of a Settings class, in order."""
    return list(dataclasses.fields(cls))


def setting_type(cls: type, name: str) -> type:
    """The value type of a field: float for `float | None`, str for `str`."""
    hint = typing.get_type_hints(cls)[name]
    options = [arg for arg in typing.get_args(hint) if arg is not type(None)]
    return options[0] if options else hint


def settings_from_dict(cls: type, data: dict, *, what: str = "the run's settings") -> Settings:
    """cls(**data), unknown keys refused in one line (a settings dict saved by a run)."""
    known = {field.name for field in dataclasses.fields(cls)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise GlassformerError(f"{what} have unknown keys {unknown} for {cls.__name__}")
    return cls(**data)
