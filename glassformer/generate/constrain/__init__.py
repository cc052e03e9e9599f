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
from glassformer.generate.constrain.mask import MaskTable
from glassformer.generate.constrain.schema import any_object_grammar, compile_schema
from glassformer.generate.constrain.token_trie import build_trie, vocabulary_bytes


def json_table(schema, tokenizer, vocab: int, eos_ids) -> MaskTable:
    """The MaskTable of a JSON schema (a dict; None: any JSON object) for a model whose
    logits have `vocab` entries, ending its reply with one of `eos_ids`."""
    grammar = any_object_grammar() if schema is None else compile_schema(schema)
    token_bytes = vocabulary_bytes(tokenizer)
    token_bytes += [b""] * (vocab - len(token_bytes))          # padding ids: never allowed
    return MaskTable(grammar, build_trie(token_bytes), vocab, eos_ids, tokenizer.encode)
