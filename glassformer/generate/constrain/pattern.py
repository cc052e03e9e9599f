"""A simple regular expression (a JSON schema's string `pattern`) -> an NFA over characters.

    "^[A-Z]{2}-\\d+$" --parse--> tree --thompson--> states; a set of states is where we are

Supported: literal characters, `.`, classes `[a-z0-9_]` and `[^...]`, `\\d \\w \\s` (and
`\\D \\W \\S`), escaped punctuation, groups `( )` and `(?: )`, `|`, the repeats `? * + {m} {m,}
{m,n}` (n at most MAX_REPEAT), `^` at the start and `$` at the end. JSON Schema's pattern is
a search, not a match: a side without its anchor may have any characters there.
"""
from __future__ import annotations

from typing import NamedTuple

from glassformer.errors import GlassformerError

MAX_REPEAT = 100                 # {m,n} bound
MAX_STATES = 5_000               # NFA states of one pattern
ANY = (True, ((0x0A, 0x0A),))    # ".": every character but a newline
CLASSES = {"d": (False, ((0x30, 0x39),)),
           "w": (False, ((0x30, 0x39), (0x41, 0x5A), (0x5F, 0x5F), (0x61, 0x7A))),
           "s": (False, ((0x09, 0x0D), (0x20, 0x20)))}


class Pattern(NamedTuple):
    """Thompson NFA: state i is ("char", (negated, ranges), next), ("split", a, b) or
    ("match",); `start` the first state."""
    states: tuple
    start: int
    source: str


def char_matches(predicate, code: int) -> bool:
    negated, ranges = predicate
    inside = any(lo <= code <= hi for lo, hi in ranges)
    return inside != negated


def compile_pattern(source: str, where: str = "pattern") -> Pattern:
    parser = _Parser(source, where)
    tree = parser.parse()
    states: list = []
    match = _add(states, ("match",), where)
    start = _build(tree, match, states, where)
    return Pattern(tuple(states), start, source)


def closure(pattern: Pattern, at) -> frozenset:
    """Every state reachable from `at` without reading a character."""
    seen, todo = set(), list(at)
    while todo:
        state = todo.pop()
        if state in seen:
            continue
        seen.add(state)
        node = pattern.states[state]
        if node[0] == "split":
            todo.extend(node[1:])
    return frozenset(seen)


def start_states(pattern: Pattern) -> frozenset:
    return closure(pattern, [pattern.start])


def advance(pattern: Pattern, at: frozenset, code: int) -> frozenset:
    """The states after reading one character (empty: the pattern cannot match)."""
    nxt = [node[2] for node in (pattern.states[s] for s in at)
           if node[0] == "char" and char_matches(node[1], code)]
    return closure(pattern, nxt)


def may_match(pattern: Pattern, at: frozenset, low: int, high: int) -> bool:
    """Can some character in low..high be read from `at`?"""
    for node in (pattern.states[s] for s in at):
        if node[0] != "char":
            continue
        negated, ranges = node[1]
        if negated or any(lo <= high and low <= hi for lo, hi in ranges):
            return True
    return False


def matched(pattern: Pattern, at: frozenset) -> bool:
    return any(pattern.states[s][0] == "match" for s in at)


def _add(states: list, node, where) -> int:
    if len(states) >= MAX_STATES:
        raise GlassformerError(f"{where}: the pattern is too large")
    states.append(node)
    return len(states) - 1


def _build(tree, nxt: int, states: list, where) -> int:
    """States matching `tree` then continuing at `nxt`; returns the entry state."""
    kind = tree[0]
    if kind == "char":
        return _add(states, ("char", tree[1], nxt), where)
    if kind == "seq":
        for part in reversed(tree[1]):
            nxt = _build(part, nxt, states, where)
        return nxt
    if kind == "alt":
        entries = [_build(option, nxt, states, where) for option in tree[1]]
        entry = entries[-1]
        for other in reversed(entries[:-1]):
            entry = _add(states, ("split", other, entry), where)
        return entry
    _, part, low, high = tree                              # ("repeat", part, low, high)
    if high is None:                                       # part{low,}: low copies then a loop
        loop = _add(states, None, where)
        body = _build(part, loop, states, where)
        states[loop] = ("split", body, nxt)
        entry = loop
    else:
        entry = nxt
        for _ in range(high - low):                        # optional copies
            body = _build(part, entry, states, where)
            entry = _add(states, ("split", body, nxt), where)   # this copy, or done
    for _ in range(low):
        entry = _build(part, entry, states, where)
    return entry


class _Parser:
    def __init__(self, source: str, where: str):
        self.text, self.at, self.where = source, 0, where

    def fail(self, what: str):
        raise GlassformerError(f"{self.where}: pattern {self.text!r:.60} is not supported: "
                               f"{what} at {self.at}")

    def peek(self) -> str:
        return self.text[self.at] if self.at < len(self.text) else ""

    def parse(self):
        anchored_start = self.text.startswith("^")
        self.at = 1 if anchored_start else 0
        tree = self.alternation()
        anchored_end = self.peek() == "$"
        if anchored_end:
            self.at += 1
        if self.at != len(self.text):
            self.fail("unexpected character")
        anything = ("repeat", ("char", (True, ())), 0, None)
        parts = ([] if anchored_start else [anything]) + [tree] + \
            ([] if anchored_end else [anything])
        return ("seq", parts)

    def alternation(self):
        options = [self.sequence()]
        while self.peek() == "|":
            self.at += 1
            options.append(self.sequence())
        return options[0] if len(options) == 1 else ("alt", options)

    def sequence(self):
        parts = []
        while self.peek() not in ("", "|", ")", "$"):
            parts.append(self.repeat(self.atom()))
        return ("seq", parts)

    def repeat(self, atom):
        mark = self.peek()
        if mark in "?*+" and mark:
            self.at += 1
            low, high = {"?": (0, 1), "*": (0, None), "+": (1, None)}[mark]
            return ("repeat", atom, low, high)
        if mark == "{":
            close = self.text.find("}", self.at)
            body = self.text[self.at + 1:close] if close > 0 else ""
            low, _, high = body.partition(",")
            if not low.isdigit() or (high and not high.isdigit()):
                self.fail("a repeat {m,n} with numbers")
            self.at = close + 1
            low_n = int(low)
            high_n = low_n if "," not in body else (int(high) if high else None)
            if (high_n is not None and high_n < low_n) or max(low_n, high_n or 0) > MAX_REPEAT:
                self.fail(f"a repeat within 0..{MAX_REPEAT}")
            return ("repeat", atom, low_n, high_n)
        return atom

    def atom(self):
        char = self.peek()
        self.at += 1
        if char == "(":
            if self.text.startswith("?:", self.at):
                self.at += 2
            elif self.peek() == "?":
                self.fail("a group other than ( ) and (?: )")
            inner = self.alternation()
            if self.peek() != ")":
                self.fail("a group without ')'")
            self.at += 1
            return inner
        if char == "[":
            return ("char", self.char_class())
        if char == ".":
            return ("char", ANY)
        if char == "\\":
            return ("char", self.escape())
        if char in "*+?{^":
            self.fail(f"{char!r} with nothing to repeat or out of place")
        return ("char", (False, ((ord(char), ord(char)),)))

    def escape(self):
        char = self.peek()
        self.at += 1
        if char.lower() in CLASSES:
            negated, ranges = CLASSES[char.lower()]
            return (char.isupper(), ranges)
        if char and not char.isalnum():
            return (False, ((ord(char), ord(char)),))
        named = {"n": 0x0A, "t": 0x09, "r": 0x0D}
        if char in named:
            return (False, ((named[char], named[char]),))
        self.fail(f"the escape \\{char}")

    def char_class(self):
        negated = self.peek() == "^"
        if negated:
            self.at += 1
        ranges = []
        first = True
        while self.peek() and (self.peek() != "]" or first):
            first = False
            char = self.peek()
            self.at += 1
            if char == "\\":
                inner_negated, inner = self.escape()
                if inner_negated:
                    self.fail("a negated class inside [ ]")
                ranges.extend(inner)
                continue
            if self.peek() == "-" and self.at + 1 < len(self.text) and \
                    self.text[self.at + 1] != "]":
                high = self.text[self.at + 1]
                self.at += 2
                if ord(high) < ord(char):
                    self.fail("a range whose end is before its start")
                ranges.append((ord(char), ord(high)))
            else:
                ranges.append((ord(char), ord(char)))
        if self.peek() != "]":
            self.fail("a class without ']'")
        self.at += 1
        return (negated, tuple(ranges))
