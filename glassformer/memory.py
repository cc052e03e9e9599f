"""Estimate, then allocate: the memory budget a user-sized allocation is checked against.

Wherever a number the user gives (a flag, a request, a model file's declared sizes) decides how
much memory a command takes, the command first estimates the bytes, then calls `check_memory`,
and only then allocates. Past the budget it is one GlassformerError line: what would need the
memory, how much, the budget, and the flag that sizes it. Nothing has been allocated yet, so a
refused command stays small and fast.

    physical_memory_bytes()   this machine's RAM (None where the OS does not say)
    memory_budget()           half of it: what one command may take (serve's KV cache too)
    check_memory(need, ...)   the one refusal
    human_bytes(n)            1536 -> '1.5 KiB', for those lines

The budget is half the machine, not all of it: the OS, the Python interpreter and the arrays an
estimate leaves out need room too, and a machine that swaps is slower than one that refuses.
"""
from __future__ import annotations

import os

from glassformer.errors import GlassformerError

UNKNOWN_MEMORY_BYTES = 8 << 30   # the budget's base where the OS does not say (8 GiB)


def physical_memory_bytes() -> int | None:
    """This machine's RAM (None where the OS does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None


def memory_budget() -> int:
    """Half the machine's physical memory: what one user-sized allocation may take."""
    return (physical_memory_bytes() or UNKNOWN_MEMORY_BYTES) // 2


def human_bytes(n: float) -> str:
    """1536 -> '1.5 KiB'; anything past PiB stays in PiB, a hostile size as 1.26e+17 PiB."""
    unit = "bytes"
    for bigger in ("KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024.0:
            break
        n, unit = n / 1024.0, bigger
    if unit == "bytes":
        return f"{n:,.0f} bytes"
    return f"{n:,.1f} {unit}" if n < 1e6 else f"{n:.3g} {unit}"


def check_memory(need: int, what: str, remedy: str, budget: int | None = None,
                 budget_is: str = "half this machine's memory") -> None:
    """Raise one GlassformerError line when `need` bytes exceed the budget (default
    memory_budget()).

    what: the thing that would take the memory, with the numbers that size it ("the KV cache of
    1 row x 1,000,000,000 positions"). remedy: the flag to change ("lower --max-new-tokens").
    budget_is: what the budget is, for the line (a command with a smaller budget says why).
    """
    budget = memory_budget() if budget is None else budget
    if need > budget:
        raise GlassformerError(f"{what} would need about {human_bytes(need)} of memory, over "
                               f"the budget of {human_bytes(budget)} ({budget_is}): {remedy}")
