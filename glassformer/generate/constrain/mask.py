"""Which tokens a grammar allows next: a mask over the vocabulary per automaton state.

    state --each trie level, one NumPy gather--> the state after every token's bytes
          --a token whose walk stays alive--> allowed; EOS allowed where the value may end

`MaskTable` is the one place these are remembered, computed lazily: the automaton's states get
small ids, `next_state[id, byte]` is filled as bytes are met (-2: not yet asked, -1: not
allowed), and each state's mask is computed once and reused by every row writing the same
grammar (the server keeps one table per schema). It is a value you hold and pass, like a
KVCache: nothing is cached behind the functions' backs.

Cost per generated token (SmolLM2, 49,152 tokens; docs/performance.md): a state met before is
one dict lookup and a write of -inf over its shorter index list (allowed or refused ids), and
the chosen token's few bytes read from `next_state`: ~0.02 ms. A new state walks the trie once
(~1-3 ms a token over a reply); bytes outside `automaton.first_bytes` are refused without a
Python step, so an object's key or an enum's next letter costs a handful of steps, not 256.

Forced text: where the grammar allows exactly one byte at a time (`{"name":` in an object whose
first key is required), the mask allows only the first token of that text as the tokenizer
writes it, up to where an allowed token could cross the text's end (`stable_tokens`); so the
reply is tokenized the way the model was trained, and the masks equal llguidance's, which does
the same.
"""
from __future__ import annotations

import bisect

import numpy as np

from glassformer.errors import GlassformerError
from glassformer.generate.constrain import automaton
from glassformer.generate.constrain.token_trie import TokenTrie

UNKNOWN, DEAD = -2, -1
MAX_FORCED = 64          # forced bytes looked ahead


class MaskTable:
    """One grammar's automaton states, their byte transitions and their masks (all lazy)."""

    def __init__(self, grammar, trie: TokenTrie, vocab: int, eos_ids, encode):
        eos_ids = [int(i) for i in eos_ids]
        self.grammar, self.trie, self.vocab = grammar, trie, vocab
        self.eos_ids = np.array(sorted(eos_ids), dtype=np.int64)
        self.encode = encode                   # text -> token ids (the forced-text rule)
        self.states: list = []                 # id -> automaton state
        self.ids: dict = {}                    # automaton state -> id
        self.next_state = np.full((64, 256), UNKNOWN, dtype=np.int64)   # (S, 256)
        self.masks: dict[int, tuple] = {}       # id -> kept(): (allow, ids)
        self.probed: set = set()                # ids whose impossible bytes are marked DEAD
        self.sorted_bytes = sorted(b for b in trie.token_bytes if b)   # tokens by prefix
        self.start = self.state_id(automaton.initial(grammar))

    def state_id(self, state: frozenset) -> int:
        found = self.ids.get(state)
        if found is not None:
            return found
        if len(self.states) == len(self.next_state):             # grow: (S, 256) -> (2S, 256)
            more = np.full_like(self.next_state, UNKNOWN)
            self.next_state = np.concatenate([self.next_state, more])
        self.ids[state] = len(self.states)
        self.states.append(state)
        return len(self.states) - 1

    def accepting(self, sid: int) -> bool:
        return automaton.accepting(self.grammar, self.states[sid])

    def walk(self, sids: np.ndarray, byts: np.ndarray) -> np.ndarray:
        """The states after one byte each: (N,) states, (N,) bytes -> (N,) (DEAD: refused)."""
        found = self.next_state[sids, byts]                      # (N,)
        unknown = found == UNKNOWN
        if unknown.any():
            for sid in np.unique(sids[unknown]).tolist():        # bytes no frame can take:
                self.refuse_impossible(sid)                      # refused without a step
            found = self.next_state[sids, byts]
            unknown = found == UNKNOWN
        if unknown.any():
            for sid, byte in set(zip(sids[unknown].tolist(), byts[unknown].tolist())):
                after = automaton.step(self.grammar, self.states[sid], byte)
                self.next_state[sid, byte] = self.state_id(after) if after else DEAD
            found = self.next_state[sids, byts]
        return found

    def refuse_impossible(self, sid: int) -> None:
        """Mark DEAD, once per state, every byte outside automaton.first_bytes (a superset
        of what step accepts), so only the few that may pass are stepped in Python."""
        if sid in self.probed:
            return
        self.probed.add(sid)
        possible = automaton.first_bytes(self.grammar, self.states[sid])
        if possible is None:
            return
        row = self.next_state[sid]                               # (256,) a view
        impossible = np.ones(256, dtype=bool)
        impossible[list(possible)] = False
        row[impossible & (row == UNKNOWN)] = DEAD

    def advance(self, sid: int, token_id: int) -> int:
        """The state after a token's bytes (DEAD if the grammar refuses them)."""
        return self.advance_bytes(sid, self.trie.token_bytes[token_id])

    def advance_bytes(self, sid: int, text: bytes) -> int:
        """The state after `text`'s bytes: a known transition is one table read each (the
        sampled token's few bytes, not the vocabulary); an unknown one asks the automaton."""
        for byte in text:
            after = int(self.next_state[sid, byte])
            if after == UNKNOWN:
                after = int(self.walk(np.array([sid]), np.array([byte]))[0])
            if after == DEAD:
                return DEAD
            sid = after
        return sid

    def kept(self, sid: int) -> tuple[bool, np.ndarray]:
        """State sid's mask as the shorter of its two index lists: (True, the allowed ids) or
        (False, the refused ids), int32, computed on first use and kept. Applying it touches
        only those ids (rows.py): one token forced -> 1 id, inside a free string -> the few
        thousand tokens holding a quote or a control byte, never all 49,152."""
        found = self.masks.get(sid)
        if found is None:
            mask = self.compute(sid)                             # (V,) bool
            allowed = np.flatnonzero(mask)
            found = ((True, allowed.astype(np.int32)) if 2 * len(allowed) <= self.vocab
                     else (False, np.flatnonzero(~mask).astype(np.int32)))
            self.masks[sid] = found
        return found

    def allowed(self, sid: int) -> np.ndarray:
        """(V,) bool: the tokens the grammar allows in state sid."""
        allow, ids = self.kept(sid)
        mask = np.full(self.vocab, not allow)
        mask[ids] = allow
        return mask

    def compute(self, sid: int) -> np.ndarray:
        mask = self.byte_mask(sid)
        forced, after = self.forced_text(sid)
        if forced is None:
            return mask
        try:
            stable = self.stable_tokens(sid, forced)
        except GlassformerError:             # text the tokenizer cannot write: bytes decide
            return mask
        if stable and mask[stable[0]]:
            mask = np.zeros_like(mask)
            mask[stable[0]] = True
        return mask

    def stable_tokens(self, sid: int, forced: str) -> list[int]:
        """The tokens of the forced text as the tokenizer writes it, up to the first place
        where an allowed token begins that reaches past the text's end (llguidance's
        "chop"): a token over that place might yet be written otherwise."""
        text = forced.encode("utf-8")
        states = [sid]
        for byte in text:                                       # the state before each byte
            states.append(self.advance_bytes(states[-1], bytes([byte])))
        cut = len(text)
        for start in range(len(text)):
            if self.crosses_end(states[start], text[start:]):
                cut = start
                break
        stable, written = [], 0
        for token in self.encode(forced):
            written += len(self.trie.token_bytes[token])
            if written > cut:
                break
            stable.append(token)
        return stable

    def crosses_end(self, sid: int, rest: bytes) -> bool:
        """Is a token that begins with `rest` and goes on allowed in state sid?"""
        at = bisect.bisect_right(self.sorted_bytes, rest)       # past rest itself
        while at < len(self.sorted_bytes) and self.sorted_bytes[at].startswith(rest):
            if self.advance_bytes(sid, self.sorted_bytes[at]) != DEAD:
                return True
            at += 1
        return False

    def byte_mask(self, sid: int) -> np.ndarray:
        """The tokens every byte of which the automaton accepts, walked level by level down
        the trie (only the nodes whose parent is alive are walked)."""
        mask = np.zeros(self.vocab, dtype=bool)
        above = np.array([sid], dtype=np.int64)                  # the root's state
        for parent, byts, (tokens, nodes) in zip(self.trie.parent, self.trie.byte,
                                                 self.trie.ends):
            states = np.full(len(parent), DEAD, dtype=np.int64)  # (N_d,)
            live = np.flatnonzero(above[parent] != DEAD)
            if len(live) == 0:
                break
            states[live] = self.walk(above[parent[live]], byts[live])
            mask[tokens] = states[nodes] != DEAD
            above = states
        if self.accepting(sid) or not mask.any():      # never a row with nothing to choose
            mask[self.eos_ids] = True
        return mask

    def forced_text(self, sid: int) -> tuple[str | None, int]:
        """The text the grammar forces from state sid (one byte allowed at a time, the value
        not yet complete), or None; and the state after it."""
        forced = bytearray()
        every = np.arange(256)
        while len(forced) < MAX_FORCED and not self.accepting(sid):
            row = self.walk(np.full(256, sid), every)            # (256,)
            allowed = np.flatnonzero(row != DEAD)
            if len(allowed) != 1:
                break
            forced.append(int(allowed[0]))
            sid = int(row[allowed[0]])
        try:
            return (bytes(forced).decode("utf-8") if forced else None), sid
        except UnicodeDecodeError:
            return None, sid
