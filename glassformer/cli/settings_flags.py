"""The objectives' settings as command-line flags: one flag per settings field, made from the
settings classes (train/objectives/settings.py), never written out by hand.

    add_settings_arguments(parser, objectives, recipes)
        --sft-weight for DPOSettings.sft_weight, ...: the field's help, its choices, and its
        default (the recipe's where the command's recipe changes it, said so); a field two
        objectives share (--beta) is one flag whose help gives each. Every flag defaults to
        None, so the run can tell what was typed.
    given_settings(args, objective, objectives)
        the settings typed for `objective` (field -> value); a flag of another objective is one
        line: "--num-generations is a grpo setting, not one of --objective dpo"

A new objective's settings therefore become flags of `train` and `finetune` by themselves.
"""
from __future__ import annotations

from glassformer.errors import GlassformerError
from glassformer.train.objectives.settings import flag_of, setting_fields, setting_type


def owners(objectives: list) -> dict[str, list]:
    """{settings field name: the objectives that have it}, in the objectives' order."""
    owned: dict[str, list] = {}
    for record in objectives:
        for field in setting_fields(record.settings):
            owned.setdefault(field.name, []).append(record)
    return owned


def default_text(objective, field, recipes: dict) -> str:
    """' (default: 1.0, the tang-dpo recipe's)' where the command's recipe changes the setting,
    ' (default: X)' for the settings class's own (its help says where that comes from), and
    nothing for a default the help describes in words (None, "")."""
    recipe = recipes.get(objective.name)
    value = field.default
    if recipe is not None and recipe.settings.get(field.name, value) != value:
        return f" (default: {recipe.settings[field.name]}, the {recipe.name} recipe's)"
    return "" if value is None or value == "" else f" (default: {value})"


def add_settings_arguments(parser, objectives: list, recipes: dict | None = None) -> None:
    """One flag per settings field of `objectives` (see the module docstring); recipes:
    objective name -> the Recipe the command starts it from."""
    recipes = recipes or {}
    group = parser.add_argument_group("objective settings",
                                      "each applies to the --objective named before its help")
    for name, having in owners(objectives).items():
        parts = []
        for record in having:
            field = {f.name: f for f in setting_fields(record.settings)}[name]
            choices = field.metadata.get("choices")
            allowed = f"; one of {', '.join(map(str, choices))}" if choices else ""
            parts.append(f"{record.name}: {field.metadata['help']}{allowed}"
                         f"{default_text(record, field, recipes)}")
        text = "; ".join(parts).replace("%", "%%")   # argparse formats help with %
        group.add_argument(flag_of(name), type=setting_type(having[0].settings, name),
                           default=None, help=text)


def given_settings(args, objective, objectives: list) -> dict:
    """The settings typed on the command line for `objective`, as {field: value}; a flag that
    belongs only to other objectives is refused in one line."""
    given = {}
    own = {field.name for field in setting_fields(objective.settings)}
    for name, having in owners(objectives).items():
        value = getattr(args, name, None)
        if value is None:
            continue
        if name not in own:
            names = " and ".join(other.name for other in having)
            raise GlassformerError(f"{flag_of(name)} is a {names} setting, not one of "
                                   f"--objective {objective.name}")
        given[name] = value
    return given
