"""Every token's bytes as a trie, stored level by level so a mask is computed for a whole
level of the trie in one NumPy step.

    tokens  b"{", b'{"', b"a", b"ab"           level 0: nodes "{", "a"       (parent: the root)
                                              level 1: nodes '{"' (of "{"), "ab" (of "a")

A token ends at one node (level = its length - 1). Tokens sharing a prefix share its nodes, so
the automaton reads each distinct prefix once. Tokens with no bytes to write (special tokens
such as <|im_end|>) are left out: the mask decides them apart (mask.py).
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np


class TokenTrie(NamedTuple):
    parent: tuple            # parent[d]: (N_d,) int64, each level-d node's parent at level d-1
    byte: tuple              # byte[d]: (N_d,) int64, the byte that node adds
    ends: tuple              # ends[d]: (token ids (M_d,), node index at level d (M_d,))
    token_bytes: tuple       # token id -> its bytes (b"" for a token left out)


def build_trie(token_bytes: list[bytes]) -> TokenTrie:
    """token_bytes[id] is the token's bytes (b"": not in the trie)."""
    depth = max((len(b) for b in token_bytes), default=0)
    index: list[dict] = [dict() for _ in range(depth)]       # level -> prefix -> node index
    parent: list[list[int]] = [[] for _ in range(depth)]
    byte: list[list[int]] = [[] for _ in range(depth)]
    ends: list[tuple[list, list]] = [([], []) for _ in range(depth)]
    for token, text in enumerate(token_bytes):
        above = 0
        for d in range(len(text)):
            prefix = text[:d + 1]
            node = index[d].get(prefix)
            if node is None:
                node = index[d][prefix] = len(parent[d])
                parent[d].append(above)
                byte[d].append(text[d])
            above = node
        if text:
            ends[len(text) - 1][0].append(token)
            ends[len(text) - 1][1].append(above)
    as_array = lambda values: np.array(values, dtype=np.int64)   # noqa: E731
    return TokenTrie(tuple(as_array(p) for p in parent), tuple(as_array(b) for b in byte),
                     tuple((as_array(t), as_array(n)) for t, n in ends), tuple(token_bytes))


def vocabulary_bytes(tokenizer) -> list[bytes]:
    """Each id's bytes (b"" for special tokens: they are never written inside a value). A
    tokenizer without `token_bytes` (char, WordPiece) gives each id's decoded text."""
    specials = set(tokenizer.special_tokens.values())
    exact = getattr(tokenizer, "token_bytes", None)
    found = []
    for token in range(tokenizer.vocab_size):
        if token in specials:
            found.append(b"")
        elif exact is not None:
            found.append(exact(token))
        else:
            found.append(tokenizer.decode([token]).encode("utf-8"))
    return found
