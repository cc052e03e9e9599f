"""A JSON number written byte by byte, kept within its bounds.

The phases follow JSON's number grammar, as llguidance writes it:
-?(0|[1-9][0-9]*)(\\.[0-9]+)?([eE][+-]?[0-9]+)?

    start -'-'-> sign -'0'-> zero -'.'-> dot -digit-> frac -e-> e -'+-'-> esign -digit-> exp
    start/sign -1..9-> int (digits)      an integer stops at zero or int

An unbounded number keeps only its phase (so "12" and "345" are one state). A bounded one
keeps its text too, and a byte is allowed only when some completion of the new text lies within
the bounds: the completions of a prefix are an interval per count of digits still to come
(`reachable`). Bounded numbers are written without an exponent, with "-" only where a negative
value fits, and "-0..." as llguidance's range expressions write it (`negative_zero_ends`).
"""
from __future__ import annotations

from fractions import Fraction
from math import ceil, floor

DIGITS = b"0123456789"
ENDS = ("zero", "int", "frac", "exp")
MAX_EXTRA_DIGITS = 40     # bounded integers: digits past the prefix tried


def bounded(node) -> bool:
    return node.low is not None or node.high is not None


def next_phase(phase: str, byte: int, integer: bool) -> str | None:
    digit = byte in DIGITS
    if phase in ("start", "sign"):
        if byte == ord("-") and phase == "start":
            return "sign"
        return "zero" if byte == ord("0") else ("int" if digit else None)
    if phase == "int" and digit:
        return "int"
    if phase in ("zero", "int"):
        if integer:
            return None
        return "dot" if byte == ord(".") else ("e" if byte in b"eE" else None)
    if phase in ("dot", "frac") and digit:
        return "frac"
    if phase == "frac":
        return "e" if byte in b"eE" else None
    if phase == "e" and byte in b"+-":
        return "esign"
    if phase in ("e", "esign", "exp") and digit:
        return "exp"
    return None


def step(node, phase: str, text: str, byte: int):
    """(phase, text) after byte, or None when the byte is not allowed."""
    nxt = next_phase(phase, byte, node.integer)
    if nxt is None:
        return None
    if not bounded(node):
        return (nxt, "")
    if nxt in ("e", "esign", "exp"):
        return None
    new = text + chr(byte)
    return (nxt, new) if feasible(node, new) else None


def ends(node, phase: str, text: str) -> bool:
    if phase not in ENDS:
        return False
    if not bounded(node):
        return True
    if text.startswith("-0") and not negative_zero_ends(node, text):
        return False
    return inside(node, Fraction(text))


def negative_zero_ends(node, text: str) -> bool:
    """llguidance's range expressions: an integer's "-0" only within two bounds; a number
    "-0.xxx" only with a last digit that is not 0 (so never "-0" or "-0.50")."""
    if node.integer:
        return node.low is not None and node.high is not None
    return "." in text and not text.endswith("0")


def inside(node, value: Fraction) -> bool:
    if node.low is not None and (value < node.low or (node.low_strict and value == node.low)):
        return False
    if node.high is not None and (value > node.high or
                                  (node.high_strict and value == node.high)):
        return False
    return True


def feasible(node, text: str) -> bool:
    """Can some completion of `text` (a prefix without exponent) end within the bounds?"""
    negative = text.startswith("-")
    body = text[1:] if negative else text
    if negative and not overlaps(node, Fraction(0), None, True, strict=True):
        return False                               # "-" only where a negative value fits
    if body == "":
        return True
    if node.integer and body == "0":               # "-0" can only end here
        return negative_zero_ends(node, text) and inside(node, Fraction(0))
    whole, dot, frac = body.partition(".")
    return any(overlaps(node, lo, hi, negative) for lo, hi in reachable(node, whole, dot, frac))


def reachable(node, whole: str, dot: str, frac: str):
    """The magnitudes the completions of a prefix can take, as [lo, hi) intervals (hi None:
    unbounded); an integer's are its own values, [lo, hi) over integers."""
    if dot:
        start = Fraction(f"{whole}.{frac}" if frac else whole)
        return [(start, start + Fraction(1, 10 ** len(frac)))]
    value = int(whole)
    if whole == "0":
        return [(Fraction(0), Fraction(1))]
    found = [(Fraction(value), Fraction(value + 1))]          # this many digits (and a fraction)
    for extra in range(1, MAX_EXTRA_DIGITS):
        scale = 10 ** extra
        found.append((Fraction(value * scale), Fraction((value + 1) * scale)))
    found.append((Fraction(value * 10 ** MAX_EXTRA_DIGITS), None))
    return found


def overlaps(node, lo: Fraction, hi, negative: bool, strict: bool = False) -> bool:
    """Does [lo, hi) of magnitudes (signed by `negative`) meet the node's bounds? Integers:
    the integer values of it only. strict: the magnitude lo itself left out."""
    if negative:                                   # magnitudes [lo, hi) are values (-hi, -lo]
        low, high = (None if hi is None else -hi), -lo
        low_open, high_open = True, strict
    else:
        low, high, low_open, high_open = lo, hi, False, True
    if node.integer:
        first = low if low is None else (floor(low) + 1 if low_open else ceil(low))
        last = high if high is None else (ceil(high) - 1 if high_open else floor(high))
        if node.low is not None:
            bound = floor(node.low) + 1 if node.low_strict else ceil(node.low)
            first = bound if first is None else max(first, bound)
        if node.high is not None:
            bound = ceil(node.high) - 1 if node.high_strict else floor(node.high)
            last = bound if last is None else min(last, bound)
        return first is None or last is None or first <= last
    # reals: the two intervals meet unless one ends before the other starts
    if node.high is not None and low is not None:
        if low > node.high or (low == node.high and (low_open or node.high_strict)):
            return False
    if node.low is not None and high is not None:
        if high < node.low or (high == node.low and (high_open or node.low_strict)):
            return False
    return True
