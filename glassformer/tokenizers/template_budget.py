"""The budgets of a chat template's render (chat_template.py; issue 32): a template is a program,
and a hostile or broken one could run for minutes or fill the memory.

Rendering stops with one line when its text passes RENDER_MAX_CHARS or its time RENDER_MAX_S
(checked at every piece of output and every RANGE_CHECK_EVERY steps of a `range`);
before that, a repetition (`'x' * n`, `list * n`), a power (`10 ** n`) or any call given a number
past RENDER_MAX_CHARS is refused before it allocates, and `range` keeps Jinja's sandbox bound
(MAX_RANGE) with a line instead of an OverflowError. Both limits are defaults a user may raise
(`RenderBudget`; the flags `--template-max-chars` and `--template-timeout` of chat, finetune, eval
and serve), and every refusal names the flag and, where it can be known, a value that fits.
"""
from __future__ import annotations

import math
import time
from functools import partial
from typing import NamedTuple

import jinja2
from jinja2.sandbox import MAX_RANGE, ImmutableSandboxedEnvironment

RENDER_MAX_CHARS = 4_000_000  # a prompt past this (~1M tokens) is past every model's context
RENDER_MAX_S = 10.0           # real templates render in milliseconds
RANGE_CHECK_EVERY = 1024      # a range looks at the clock every this many steps
COUNT_ON_S = 1.0              # past max_chars, the text is counted (not kept) this long more
POWER_MAX_BITS = 1 << 16      # `a ** b` with a result past this many bits is refused


class RenderBudget(NamedTuple):
    """How far one render may go (see the module docstring); None: the module's default."""
    max_chars: int | None = None    # characters of rendered text (--template-max-chars)
    max_s: float | None = None      # seconds of rendering (--template-timeout)

    def chars(self) -> int:
        return RENDER_MAX_CHARS if self.max_chars is None else self.max_chars

    def seconds(self) -> float:
        return RENDER_MAX_S if self.max_s is None else self.max_s


class RenderLimit(Exception):
    """A template passed a budget (see the module docstring); the message says which."""


class BoundedSandbox(ImmutableSandboxedEnvironment):
    """transformers' sandbox, with repetitions, powers and calls bounded before they allocate
    (by `budget`, set once when the environment is made)."""
    intercepted_binops = frozenset({"*", "**"})
    budget = RenderBudget()

    def call_binop(self, context, operator: str, left, right):
        if operator == "*":
            _check_repeat(left, right, self.budget.chars())
            _check_repeat(right, left, self.budget.chars())
        elif _is_int(left) and _is_int(right) and abs(left) > 1 and right > 0 and \
                right * math.log2(abs(left)) > POWER_MAX_BITS:
            raise RenderLimit(f"it computes {left} ** {right}, a number of more than "
                              f"{POWER_MAX_BITS:,} bits")
        return super().call_binop(context, operator, left, right)

    def call(__self, __context, __obj, *args, **kwargs):  # noqa: N805 - Jinja's own signature
        max_chars = __self.budget.chars()
        for value in (*args, *kwargs.values()):
            # (range has its own bound, with its own line)
            if _is_int(value) and abs(value) > max_chars and \
                    getattr(__obj, "func", None) is not _timed_range:
                raise RenderLimit(f"it calls {getattr(__obj, '__name__', 'a function')} with "
                                  f"{value:,}, past the {max_chars:,} characters a prompt may "
                                  f"have{raise_chars(abs(value))}")
        return super().call(__context, __obj, *args, **kwargs)


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def raise_chars(fits: int) -> str:
    """The end of a size refusal: the flag, and the value that fits."""
    return f" (--template-max-chars {fits} lets it render)"


def raise_timeout(seconds: float) -> str:
    """The end of a time refusal: the flag, and a longer limit to try."""
    return f" (--template-timeout {2 * seconds:g} or more may let it finish)"


def _check_repeat(sequence, times, max_chars: int) -> None:
    """Refuse `sequence * times` whose result would be past max_chars items."""
    if isinstance(sequence, (str, list, tuple)) and _is_int(times) and \
            len(sequence) * times > max_chars:
        raise RenderLimit(f"it repeats {len(sequence):,} items {times:,} times, past the "
                          f"{max_chars:,} characters a prompt may have"
                          f"{raise_chars(len(sequence) * times)}")


class TimedRange:
    """`range` in a template: Jinja's sandbox bound, and the render's deadline."""

    def __init__(self, numbers: range, deadline: float, seconds: float) -> None:
        self.numbers, self.deadline, self.seconds = numbers, deadline, seconds

    def __len__(self) -> int:
        return len(self.numbers)

    def __iter__(self):
        for step, number in enumerate(self.numbers):
            if step % RANGE_CHECK_EVERY == 0 and time.monotonic() > self.deadline:
                raise RenderLimit(f"it was still rendering after {self.seconds:g} s"
                                  f"{raise_timeout(self.seconds)}")
            yield number


def _timed_range(deadline: float, seconds: float, *args) -> TimedRange:
    numbers = range(*args)
    if len(numbers) > MAX_RANGE:
        raise RenderLimit(f"it asks for a range of {len(numbers):,} numbers; templates may use "
                          f"at most {MAX_RANGE:,}")
    return TimedRange(numbers, deadline, seconds)


def render_within_budget(compiled: jinja2.Template, **context) -> str:
    """compiled.render(**context), piece by piece, stopped at the budget of the environment it
    was compiled in (BoundedSandbox.budget; RenderLimit). Past the size limit the pieces are
    counted, not kept, for COUNT_ON_S more, so the refusal can name a size that fits."""
    budget = getattr(compiled.environment, "budget", RenderBudget())
    max_chars, seconds = budget.chars(), budget.seconds()
    deadline = time.monotonic() + seconds
    pieces, size = [], 0
    rendering = compiled.generate(range=partial(_timed_range, deadline, seconds), **context)
    for piece in rendering:
        size += len(piece)
        if size > max_chars:
            raise RenderLimit(too_long(rendering, size, max_chars, min(
                deadline, time.monotonic() + COUNT_ON_S)))
        if time.monotonic() > deadline:
            raise RenderLimit(f"it was still rendering after {seconds:g} s"
                              f"{raise_timeout(seconds)}")
        pieces.append(piece)
    return "".join(pieces)


def too_long(rendering, size: int, max_chars: int, until: float) -> str:
    """The size refusal: the rest of `rendering` counted (never kept) until `until`, to name
    the whole size; or, when it goes on past that, the size reached so far."""
    growing = True
    try:
        for piece in rendering:
            size += len(piece)
            if time.monotonic() > until:
                break
        else:
            growing = False
    except Exception:   # noqa: BLE001 - the render is refused already; the size is what it says
        pass
    if growing:
        return (f"its text passed {max_chars:,} characters and was still growing at {size:,} "
                "(--template-max-chars raises the limit)")
    return f"its text passed {max_chars:,} characters: it is {size:,}{raise_chars(size)}"
