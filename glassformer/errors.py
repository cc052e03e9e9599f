"""Error types raised on bad input.

Every error glassformer raises for bad input is a `ValueError` subclass (or `FileNotFoundError`)
whose message names the argument, what was expected and what arrived. The CLI prints the message
on one line and exits with code 2; library users can catch `GlassformerError`.
"""


class GlassformerError(ValueError):
    """Bad input: a wrong shape, dtype, id, file or setting. The message says which and why."""


class ShapeError(GlassformerError):
    """An array has the wrong shape; the message uses the legend letters (B, T, C, ...)."""


class CheckpointError(GlassformerError):
    """A checkpoint or weights file is missing, truncated, corrupt or does not match the model."""


def check_choice(name: str, value, choices, error: type = GlassformerError) -> None:
    """Refuse a value outside `choices` in one line naming the setting, what is allowed and what
    arrived: check_choice("--schedule", "linear", ("cosine", "inverse-sqrt")) says
    "--schedule must be one of cosine, inverse-sqrt, got 'linear'". Every "must be one of" check
    of the package is this one; `error` is the GlassformerError subclass to raise (a checkpoint's
    bad dtype is a CheckpointError)."""
    if value not in choices:
        allowed = ", ".join(str(choice) for choice in choices)
        raise error(f"{name} must be one of {allowed}, got {value!r}")
