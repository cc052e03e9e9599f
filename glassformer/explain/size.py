"""How big a walk-through may get, estimated from its sizes before any input is made.

A walk-through keeps every step's array and prints each one, one block per batch item and head,
with a heatmap of T x S cells; --backward adds float64 copies and a finite-difference check. Its
sizes are flags (--batch, --seq, --d-model, --d-k, --heads), so a typo like --seq 20000 asked for
(B, T, T) arrays of 400 million numbers (8 GB passed, no answer), and --batch 100000 for
1.3 million printed blocks (minutes). So `check_walkthrough_size` estimates, from the options
alone, the bytes the run holds and the blocks it prints, and refuses past WALKTHROUGH_BUDGET or
MAX_BLOCKS in one line naming the flags:

    numbers  = B H T T + B T max(C, H D)     the largest step arrays: attention weights, activations
    bytes    ~ ARRAYS_KEPT x 4 x numbers      (x BACKWARD_FACTOR with --backward) + the heatmap text
    blocks   = B H                            printed per step
    check    = 2 x (inputs nudged) x numbers  --backward's finite differences, capped at FD_MAX_WORK

A walk-through is for reading: its useful sizes take a few MB, so its budget is 1 GiB (or half
the machine, if smaller), not the machine.
"""
from __future__ import annotations

from glassformer.errors import GlassformerError
from glassformer.memory import check_memory, memory_budget

WALKTHROUGH_BUDGET = 1 << 30   # 1 GiB
MAX_BLOCKS = 1_000             # printed blocks (batch items x heads) per step
ARRAYS_KEPT = 12               # step arrays of the largest size kept at once (and their text)
BACKWARD_FACTOR = 3            # --backward: gradients, float64 copies for the check
HEATMAP_BYTES_PER_CELL = 8     # 2 characters per cell, in Python strings and the joined text
FLOAT_BYTES = 4
# A size the part sets itself: small (the seed's: batch 1, one head, 3 tokens of width 4)
OTHER_SIZE = {"batch": 1, "heads": 1, "seq": 4, "d_model": 4, "d_k": 4}
FD_MAX_WORK = 200_000_000      # --backward: nudged inputs x numbers per forward, ~5 s of checks
SIZE_FLAGS = ("batch", "seq", "d_model", "d_k", "heads")


def walkthrough_sizes(defaults: dict, options: dict) -> dict[str, int]:
    """B, T, C, D, H as the run will use them: given, else the part's default, else OTHER_SIZE
    (a part that takes no such size counts 1)."""
    sizes = {}
    for name in SIZE_FLAGS:
        if name not in defaults:
            sizes[name] = 1
        else:
            value = options.get(name)
            sizes[name] = value if isinstance(value, int) else OTHER_SIZE[name]
    return sizes


def step_numbers(sizes: dict[str, int]) -> int:
    """The numbers of the largest step arrays: attention weights (B, H, T, T) and activations
    (B, T, max(C, H D))."""
    b, t, c, d, h = (sizes[name] for name in SIZE_FLAGS)
    return b * h * t * t + b * t * max(c, h * d)


def walkthrough_bytes(sizes: dict[str, int], backward: bool) -> int:
    """The rough bytes a walk-through of these sizes holds (see the module docstring)."""
    arrays = ARRAYS_KEPT * FLOAT_BYTES * step_numbers(sizes)
    heatmap = HEATMAP_BYTES_PER_CELL * sizes["seq"] ** 2
    return arrays * (BACKWARD_FACTOR if backward else 1) + heatmap


def check_work(sizes: dict[str, int]) -> int:
    """The finite-difference check's work: it runs the forward twice per input number (the
    inputs (B, T, C) and a block's weights, ~4 C max(C, H D)), each over step_numbers."""
    b, t, c, d, h = (sizes[name] for name in SIZE_FLAGS)
    nudged = b * t * c + 4 * c * max(c, h * d)
    return 2 * nudged * step_numbers(sizes)


def _given(sizes: dict, given: dict, names) -> str:
    """'--seq 20,000 --batch 2' for the flags that were given among `names`."""
    flags = [f"--{name.replace('_', '-')} {sizes[name]:,}" for name in names
             if given.get(name) is not None]
    return " ".join(flags) or "its default sizes"


def check_walkthrough_size(name: str, defaults: dict, options: dict, given: dict,
                           backward: bool) -> None:
    """Refuse, in one line and before any input is made, a walk-through past its budget.
    options: the part's resolved options; given: the ones the user gave (named in the line)."""
    sizes = walkthrough_sizes(defaults, options)
    blocks = sizes["batch"] * sizes["heads"]
    if blocks > MAX_BLOCKS:
        raise GlassformerError(
            f"explain {name} at {_given(sizes, given, ('batch', 'heads'))} would print "
            f"{blocks:,} blocks per step (one per batch item and head), over the walk-through's "
            f"{MAX_BLOCKS:,}: lower --batch (or --heads)")
    work = check_work(sizes)
    if backward and work > FD_MAX_WORK:
        forwards = work // step_numbers(sizes)
        raise GlassformerError(
            f"explain {name} --backward at {_given(sizes, given, SIZE_FLAGS)}: its "
            f"finite-difference check would run the forward {forwards:,} times over "
            f"{step_numbers(sizes):,} numbers each, past the walk-through's budget of "
            f"{FD_MAX_WORK:,}: lower --batch, --seq or --d-model, or drop --backward")
    budget = min(WALKTHROUGH_BUDGET, memory_budget())
    check_memory(walkthrough_bytes(sizes, backward),
                 f"explain {name} at {_given(sizes, given, SIZE_FLAGS)}",
                 "lower --seq, --batch or --d-model", budget=budget,
                 budget_is="a walk-through's, for reading")
