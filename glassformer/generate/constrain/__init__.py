"""Constrained decoding: a JSON schema -> the tokens allowed at each step of a reply.

    schema.py      a JSON schema (the supported subset, checked) -> a Grammar of nodes
    pattern.py     a string's simple `pattern` -> an NFA over characters
    numbers.py     a number written digit by digit within its bounds
    automaton.py   the Grammar as an automaton over bytes (states are stacks of frames)
    token_trie.py  every token's bytes as a trie, level by level
    mask.py        MaskTable: per automaton state, the mask over the vocabulary (lazy, kept)
    rows.py        a row's constraint: mask its logits, advance it by the token it chose

A reply written under a constraint always parses and validates: each step only tokens whose
bytes keep the text a prefix of some valid value are allowed, and end-of-text only when the
value is complete; after the value nothing else is allowed, so the reply ends there.
"""
from glassformer.generate.constrain.mask import DEAD, MaskTable
from glassformer.generate.constrain.rows import RowConstraint, advance_rows, mask_rows
from glassformer.generate.constrain.schema import any_object_grammar, compile_schema
from glassformer.generate.constrain.token_trie import TokenTrie, build_trie, vocabulary_bytes


def vocabulary_trie(tokenizer, vocab: int) -> TokenTrie:
    """The trie of a model's vocabulary: `vocab` ids (the logits' width; ids past the
    tokenizer's are padding, never allowed). Build it once per model (about 0.5 s for 49k
    tokens) and share it between schemas."""
    token_bytes = vocabulary_bytes(tokenizer)
    return build_trie(token_bytes + [b""] * (vocab - len(token_bytes)))


def json_table(schema, trie: TokenTrie, eos_ids, encode) -> MaskTable:
    """The MaskTable of a JSON schema (a dict; None: any JSON object), for replies ended by
    one of `eos_ids`; encode: the tokenizer's text -> ids (forced text, mask.py)."""
    grammar = any_object_grammar() if schema is None else compile_schema(schema)
    return MaskTable(grammar, trie, len(trie.token_bytes), eos_ids, encode)
