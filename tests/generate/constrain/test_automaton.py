"""Random walks through the masks of a byte vocabulary: every value written to the end parses and
validates with `jsonschema`, and end-of-text is allowed exactly where the value is complete."""
import json

import jsonschema
import numpy as np
import pytest

from glassformer.generate.constrain import automaton
from glassformer.generate.constrain import (RowConstraint, advance_rows, build_trie, json_table,
                                            mask_rows)
from schemas import SCHEMAS

EOS = 256
# every byte, then a few multi-byte tokens such as a BPE vocabulary has, then end-of-text
TOKENS = [bytes([b]) for b in range(256)] + [b""] + [b'{"', b'":', b'","', b'"}', b"true",
                                                     b"null", b"12", b"\xe4\xb8\xad"]


@pytest.fixture(scope="module")
def trie():
    return build_trie(TOKENS)


def encode(text: str) -> list[int]:
    return list(text.encode("utf-8"))


def walk(table, rng, steps=400) -> tuple[bytes, bool]:
    """Sample uniformly among the allowed tokens (end-of-text favoured once allowed)."""
    row = RowConstraint.start(table)
    written = b""
    for _ in range(steps):
        allowed = np.flatnonzero(table.allowed(row.state))
        assert len(allowed) > 0, written                 # never stuck
        if EOS in allowed and (len(allowed) == 1 or rng.random() < 0.5):
            assert row.complete()
            return written, True
        token = int(rng.choice(allowed[allowed != EOS]))
        advance_rows([row], np.array([token]))
        written += TOKENS[token]
    return written, False


@pytest.mark.parametrize("index", range(len(SCHEMAS)))
def test_random_values_validate(trie, index):
    schema = SCHEMAS[index]
    table = json_table(schema, trie, [EOS], encode)
    rng = np.random.default_rng(index)
    finished = 0
    for _ in range(5):
        written, done = walk(table, rng)
        if done:
            jsonschema.validate(json.loads(written.decode("utf-8")), schema)
            finished += 1
    assert finished >= 3


def test_json_object_is_any_object(trie):
    table = json_table(None, trie, [EOS], encode)
    rng = np.random.default_rng(0)
    for _ in range(10):
        written, done = walk(table, rng)
        if done:
            assert isinstance(json.loads(written.decode("utf-8")), dict)


def test_mask_rows_leaves_free_rows_alone(trie):
    table = json_table({"type": "boolean"}, trie, [EOS], encode)
    logits = np.zeros((2, len(TOKENS)))
    masked = mask_rows(logits, [RowConstraint.start(table), None])
    assert sorted(np.flatnonzero(masked[0] == 0)) == [ord("f"), ord("t"), TOKENS.index(b"true")]
    assert (masked[1] == 0).all()


def test_forced_text_allows_its_first_token_only(trie):
    schema = {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"],
              "additionalProperties": False}
    table = json_table(schema, trie, [EOS], lambda text: [TOKENS.index(b'{"')] + encode(
        text[2:]) if text.startswith('{"') else encode(text))
    assert np.flatnonzero(table.allowed(table.start)).tolist() == [TOKENS.index(b'{"')]


@pytest.mark.parametrize("index", range(0, len(SCHEMAS), 3))
def test_first_bytes_hold_every_byte_step_accepts(trie, index):
    """automaton.first_bytes is a superset of the bytes step takes, in every state the masks
    of random walks met (the mask table refuses the rest without stepping)."""
    table = json_table(SCHEMAS[index], trie, [EOS], encode)
    rng = np.random.default_rng(index)
    for _ in range(3):
        walk(table, rng)
    for state in table.states:
        possible = automaton.first_bytes(table.grammar, state)
        if possible is not None:
            accepted = {b for b in range(256) if automaton.step(table.grammar, state, b)}
            assert accepted <= possible, (state, accepted - possible)


def test_mask_rows_matches_the_mask_kept_either_way(trie):
    """A state's mask is kept as its shorter index list: the allowed ids (a forced quote) or
    the refused ones (inside a string); mask_rows gives -inf exactly where it refuses."""
    table = json_table({"type": "string", "maxLength": 8}, trie, [EOS], encode)
    inside = table.advance_bytes(table.start, b'"ab')
    assert table.kept(table.start)[0] and not table.kept(inside)[0]
    logits = np.random.default_rng(0).normal(size=(2, len(TOKENS)))
    rows = [RowConstraint(table, table.start), RowConstraint(table, inside)]
    masked = mask_rows(logits, rows)
    for i, row in enumerate(rows):
        allowed = table.allowed(row.state)
        assert np.array_equal(np.isneginf(masked[i]), ~allowed)
        assert np.array_equal(masked[i][allowed], logits[i][allowed])
