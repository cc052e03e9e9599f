"""The grammar as an automaton over bytes: which byte may come next, and where it leads.

A *stack* is a tuple of frames, the innermost value being written last: writing
`{"a":[1,` the stack is (object: in the value of "a", array: after a comma). A *state* is a
frozenset of stacks: `anyOf` and a number that may end or go on keep several alive at once,
and a state is dead when the set is empty. States are plain values (tuples of tuples), so they
can be keys of the mask table (mask.py), which computes each one's mask once.

    step(grammar, state, byte) -> state         (empty: that byte is not allowed)
    accepting(grammar, state) -> bool           the value may end here (EOS allowed)

Every stack kept alive can still be completed (a string with room left, an integer whose digits
can still reach its bounds), so a row never runs into a state with nothing allowed.

Frames (the node index `n` says which schema node it writes):
    ("start", n)                          about to write node n (expanded at once)
    ("lit", n, pos, lo, hi)               texts[lo:hi] of a Lit still match, pos bytes written
    ("str", n, inside, chars, utf8, esc, rx)   a string: characters so far, UTF-8 bytes still
                                          due (need, lo, hi, code), the escape being read
                                          ("" none, "\\" after a backslash, "u"...), the
                                          pattern's NFA states
    ("num", n, phase, text)               a number's phase (below) and, with bounds, its text
    ("arr", n, phase, count)              phase: open first after comma value
    ("obj", n, phase, nxt, cands, pos)    keys from index nxt; cands: keys matching so far
    ("aobj", phase) / ("aarr", phase)     json_object's any object / array
"""
from __future__ import annotations

from glassformer.generate.constrain import numbers, pattern as rx
from glassformer.generate.constrain.schema import (AnyArr, AnyObj, AnyOf, AnyValue, Arr, Lit,
                                                   Num, Obj, Str)

MAX_DEPTH = 20                   # json_object: objects and arrays nested at most this deep
PLAIN_STR = 3                    # any_object_grammar's nodes: a string, a number, true/false/null
SCALARS = (3, 4, 5)
ESCAPES = b'"\\bfnrt'                   # llguidance's: no "\/"
HEX = b"0123456789abcdefABCDEF"
# \u escapes, as llguidance writes them: \u0000-\u001F and \u007F, the characters a JSON
# string may not hold raw. State -> {byte: next state (None: the escape is complete)}
UNICODE_ESCAPE = {"u": {ord("0"): "u0"}, "u0": {ord("0"): "u00"},
                  "u00": {ord("0"): "hex", ord("1"): "hex", ord("7"): "del"},
                  "hex": dict.fromkeys(HEX), "del": dict.fromkeys(b"fF")}


def initial(grammar) -> frozenset:
    return frozenset(expand(grammar, (("start", grammar.root),)))


def accepting(grammar, state: frozenset) -> bool:
    return any(not stack or (len(stack) == 1 and ends(grammar, stack[0])) for stack in state)


def step(grammar, state: frozenset, byte: int) -> frozenset:
    found = set()
    for stack in state:
        found.update(step_stack(grammar, stack, byte))
    return frozenset(found)


def first_bytes(grammar, state: frozenset) -> set | None:
    """A superset of the bytes `step` may accept in this state, read off the innermost frames
    without stepping (None: any byte may be; asked of a string's inside, a number, an array's
    first value). The mask table marks the other bytes refused at once: an object's key, a
    literal or a punctuation mark allows a few bytes of 256, and each `step` costs Python."""
    found = set()
    for stack in state:
        more = stack_first_bytes(grammar, stack)
        if more is None:
            return None
        found |= more
    return found


def stack_first_bytes(grammar, stack: tuple) -> set | None:
    if not stack:
        return set()
    top, rest = stack[-1], stack[:-1]
    kind = top[0]
    if kind == "lit":
        _, n, pos, lo, hi = top
        found = {text[pos] for text in grammar.nodes[n].texts[lo:hi] if len(text) > pos}
    elif kind == "str" and not top[2]:
        found = {0x22}
    elif kind == "arr" and top[2] in ("open", "after"):
        found = {0x5B} if top[2] == "open" else {0x5D, 0x2C}
    elif kind == "obj" and top[2] != "value":
        found = obj_first_bytes(grammar, top)
    else:
        return None
    if ends(grammar, top) and rest:                    # the value may end: its parent reads
        parent = stack_first_bytes(grammar, rest[:-1] + (after_value(rest[-1]),))
        return None if parent is None else found | parent
    return found


def obj_first_bytes(grammar, frame: tuple) -> set:
    """The bytes step_obj may take from an object frame (not in its "value" phase)."""
    _, n, phase, nxt, cands, pos = frame
    props = grammar.nodes[n].props
    if phase == "open":
        return {0x7B}
    if phase == "colon":
        return {0x3A}
    if phase == "after":
        return {0x7D, 0x2C} if nxt < len(props) else {0x7D}
    found = {0x7D} if phase == "first" else set()
    if phase in ("first", "comma"):
        cands, pos = [], 0
        for index in range(nxt, len(props)):                  # as step_obj: up to the next
            cands.append(index)                               # required key
            if props[index][2]:
                break
    return found | {props[i][0][pos] for i in cands if len(props[i][0]) > pos}


def step_stack(grammar, stack: tuple, byte: int) -> list:
    """Every stack after `byte`: the innermost frame reads it (or opens a child value that
    reads it), or the innermost value ends and its parent reads it."""
    if not stack:
        return []
    top, rest = stack[-1], stack[:-1]
    found = []
    for replacement, consumed in step_frame(grammar, top, byte, len(stack)):
        for new in expand(grammar, rest + replacement):
            found.extend([new] if consumed else step_stack(grammar, new, byte))
    if ends(grammar, top) and rest:
        found.extend(step_stack(grammar, rest[:-1] + (after_value(rest[-1]),), byte))
    return found


def expand(grammar, stack: tuple) -> list:
    """A stack whose top is ("start", n) -> the stacks writing each way node n can start;
    a top that is ("done",) is popped and its parent told its value is written."""
    if not stack:
        return [stack]
    top = stack[-1]
    if top[0] == "done":
        rest = stack[:-1]
        return [rest] if not rest else expand(grammar, rest[:-1] + (after_value(rest[-1]),))
    if top[0] != "start":
        return [stack]
    node = grammar.nodes[top[1]]
    rest = stack[:-1]
    if isinstance(node, AnyOf):
        return [s for option in node.options for s in expand(grammar, rest + (("start", option),))]
    if isinstance(node, AnyValue):
        options = SCALARS if len(stack) > MAX_DEPTH else (0, 2) + SCALARS
        return [s for option in options for s in expand(grammar, rest + (("start", option),))]
    return [rest + (first_frame(grammar, top[1]),)]


def first_frame(grammar, n: int) -> tuple:
    node = grammar.nodes[n]
    if isinstance(node, Lit):
        return ("lit", n, 0, 0, len(node.texts))
    if isinstance(node, Str):
        return ("str", n, False, 0, None, "",
                None if node.pattern is None else rx.start_states(node.pattern))
    if isinstance(node, Num):
        return ("num", n, "start", "")
    if isinstance(node, Arr):
        return ("arr", n, "open", 0)
    if isinstance(node, Obj):
        return ("obj", n, "open", 0, (), 0)
    if isinstance(node, AnyObj):
        return ("aobj", "open")
    assert isinstance(node, AnyArr), node
    return ("aarr", "open")


DONE = ((("done",),), True)     # a replacement: the value is written (popped by expand)


def took(*frames) -> tuple:
    """A replacement whose frames read the byte."""
    return (frames, True)


def opens(parent: tuple, child: int) -> tuple:
    """A replacement that opens a child value, which then reads the byte itself."""
    return ((parent, ("start", child)), False)


def step_frame(grammar, frame: tuple, byte: int, depth: int) -> list:
    """The replacements of the innermost frame after `byte`: (frames, whether they read it)."""
    kind = frame[0]
    if kind == "lit":
        return step_lit(grammar, frame, byte)
    if kind == "str":
        return step_str(grammar, frame, byte)
    if kind == "num":
        nxt = numbers.step(grammar.nodes[frame[1]], frame[2], frame[3], byte)
        return [] if nxt is None else [took(("num", frame[1]) + nxt)]
    if kind == "arr":
        return step_arr(grammar, frame, byte)
    if kind == "obj":
        return step_obj(grammar, frame, byte)
    return step_any(frame, byte, depth)


def ends(grammar, frame: tuple) -> bool:
    """May this value end here (its next byte belongs to its parent)?"""
    if frame[0] == "num":
        return numbers.ends(grammar.nodes[frame[1]], frame[2], frame[3])
    if frame[0] == "lit":
        _, n, pos, lo, hi = frame
        return len(grammar.nodes[n].texts[lo]) == pos    # sorted: the shortest comes first
    return False


def after_value(parent: tuple) -> tuple:
    """The parent frame once the value it was waiting for is written."""
    kind = parent[0]
    if kind == "arr":
        return ("arr", parent[1], "after", parent[3] + 1)
    if kind == "obj":
        return ("obj", parent[1], "after", parent[3] + 1, (), 0)
    if kind == "aobj":
        return ("aobj", "colon" if parent[1] == "key" else "after")
    return ("aarr", "after")


def step_lit(grammar, frame, byte) -> list:
    _, n, pos, lo, hi = frame
    texts = grammar.nodes[n].texts
    kept = [i for i in range(lo, hi) if len(texts[i]) > pos and texts[i][pos] == byte]
    if not kept:
        return []
    new = ("lit", n, pos + 1, kept[0], kept[-1] + 1)
    if len(kept) == 1 and len(texts[kept[0]]) == pos + 1:
        return [DONE]
    return [took(new)]


def step_str(grammar, frame, byte) -> list:
    _, n, inside, chars, utf8, esc, states = frame
    node = grammar.nodes[n]
    if not inside:
        return [took(("str", n, True, 0, None, "", states))] if byte == 0x22 else []
    if utf8 is not None:                                      # a continuation byte is due
        need, lo, hi, code = utf8
        if not lo <= byte <= hi:
            return []
        # the code point matters to a pattern only: without one it stays 0, so partial
        # characters of a plain string share one state per (chars, bytes due, range)
        code = 0 if states is None else (code << 6) | (byte & 0x3F)
        if need > 1:
            return [took(("str", n, True, chars, (need - 1, 0x80, 0xBF, code), "", states))]
        return char_read(node, frame, code)
    if esc == "\\":                                           # after a backslash
        if byte == ord("u") and node.pattern is None:
            return [took(("str", n, True, chars, None, "u", states))]
        if byte not in ESCAPES or node.pattern is not None:
            return []
        return char_read(node, frame, {ord("b"): 8, ord("f"): 12, ord("n"): 10, ord("r"): 13,
                                       ord("t"): 9}.get(byte, byte))
    if esc:                                                   # \u00XX: only what JSON must
        allowed = UNICODE_ESCAPE[esc]                         # escape (controls and DEL)
        if byte not in allowed:
            return []
        following = allowed[byte]
        if following is None:
            return char_read(node, frame, 0x7F)               # the character is a control
        return [took(("str", n, True, chars, None, following, states))]
    if byte == 0x22:                                          # the closing quote
        done = chars >= node.min_len and (states is None or rx.matched(node.pattern, states))
        return [DONE] if done else []
    if node.max_len is not None and chars >= node.max_len:
        return []
    if byte == 0x5C:                                          # no escapes under a pattern
        escape = ("str", n, True, chars, None, "\\", states)
        return [] if node.pattern is not None else [took(escape)]
    if byte < 0x20 or byte == 0x7F:
        return []
    if byte < 0x80:
        return char_read(node, frame, byte)
    lead = utf8_lead(byte)
    if lead is None:
        return []
    need, lo, hi, bits = lead
    if states is not None and not rx.may_match(node.pattern, states, *lead_codes(lead)):
        return []
    bits = 0 if states is None else bits
    return [took(("str", n, True, chars, (need, lo, hi, bits), "", states))]


def char_read(node, frame, code: int) -> list:
    """The string frame after one whole character."""
    _, n, _, chars, _, _, states = frame
    if states is not None:
        states = rx.advance(node.pattern, states, code)
        if not states:
            return []
    cap = node.min_len if node.max_len is None else node.max_len   # past it, counts agree
    return [took(("str", n, True, min(chars + 1, cap), None, "", states))]


def utf8_lead(byte: int):
    """(continuation bytes due, the first one's range, the bits so far) of a UTF-8 lead byte;
    None for a byte no well-formed character starts with (overlong forms and surrogates are
    ruled out by the first continuation's range)."""
    if 0xC2 <= byte <= 0xDF:
        return 1, 0x80, 0xBF, byte & 0x1F
    if 0xE0 <= byte <= 0xEF:
        lo, hi = {0xE0: (0xA0, 0xBF), 0xED: (0x80, 0x9F)}.get(byte, (0x80, 0xBF))
        return 2, lo, hi, byte & 0x0F
    if 0xF0 <= byte <= 0xF4:
        lo, hi = {0xF0: (0x90, 0xBF), 0xF4: (0x80, 0x8F)}.get(byte, (0x80, 0xBF))
        return 3, lo, hi, byte & 0x07
    return None


def lead_codes(lead: tuple) -> tuple[int, int]:
    """The code points a UTF-8 lead byte may start, (lowest, highest), from utf8_lead's
    (continuation bytes due, first continuation's range, bits)."""
    need, lo, hi, bits = lead
    shift = 6 * need
    rest = (1 << (shift - 6)) - 1                             # the later continuations' bits
    return ((bits << shift) | ((lo & 0x3F) << (shift - 6)),
            (bits << shift) | ((hi & 0x3F) << (shift - 6)) | rest)


def step_arr(grammar, frame, byte) -> list:
    _, n, phase, count = frame
    node = grammar.nodes[n]
    if phase == "open":
        return [took(("arr", n, "first", 0))] if byte == 0x5B else []
    if byte == 0x5D and phase in ("first", "after") and count >= node.min_items:
        return [DONE]
    room = node.max_items is None or count < node.max_items
    if byte == 0x2C and phase == "after" and room:
        return [took(("arr", n, "comma", count))]
    if phase in ("first", "comma") and room:
        return [opens(("arr", n, "value", count), node.item)]
    return []


def step_obj(grammar, frame, byte) -> list:
    _, n, phase, nxt, cands, pos = frame
    props = grammar.nodes[n].props
    if phase == "open":
        return [took(("obj", n, "first", 0, (), 0))] if byte == 0x7B else []
    if byte == 0x7D and phase in ("first", "after"):
        return [DONE] if not any(req for _, _, req in props[nxt:]) else []
    if byte == 0x2C and phase == "after":
        return [took(("obj", n, "comma", nxt, (), 0))] if nxt < len(props) else []
    if phase in ("first", "comma"):
        cands = []
        for index in range(nxt, len(props)):                  # up to the next required key
            cands.append(index)
            if props[index][2]:
                break
        phase, pos = "key", 0
    if phase == "key":
        kept = tuple(i for i in cands if len(props[i][0]) > pos and props[i][0][pos] == byte)
        if not kept:
            return []
        done = [i for i in kept if len(props[i][0]) == pos + 1]
        if done:                                              # keys are quoted: one ends here
            return [took(("obj", n, "colon", done[0], (), 0))]
        return [took(("obj", n, "key", nxt, kept, pos + 1))]
    if phase == "colon" and byte == 0x3A:
        return [took(("obj", n, "value", nxt, (), 0), ("start", props[nxt][1]))]
    return []


def step_any(frame, byte, depth) -> list:
    """json_object's any object ("aobj") and any array ("aarr"): nodes 1 (any value) and
    PLAIN_STR (a key) of any_object_grammar."""
    kind, phase = frame
    opening, closing = (0x7B, 0x7D) if kind == "aobj" else (0x5B, 0x5D)
    if phase == "open":
        return [took((kind, "first"))] if byte == opening else []
    if byte == closing and phase in ("first", "after"):
        return [DONE]
    if byte == 0x2C and phase == "after":
        return [took((kind, "comma"))]
    if kind == "aobj" and phase == "colon":
        return [took(("aobj", "value"), ("start", 1))] if byte == 0x3A else []
    if phase in ("first", "comma"):
        child = PLAIN_STR if kind == "aobj" else 1
        waiting = (kind, "key" if kind == "aobj" else "value")
        return [opens(waiting, child)]
    return []
