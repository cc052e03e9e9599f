"""Our masks equal llguidance's (1.9.1) at every step of 200 sampled documents (40 schemas x 5),
on SmolLM2's tokenizer: llguidance's tokenizer is built offline from the tokenizer.json that
glassformer writes for it, and its JSON options are the whitespace rule we write,
`whitespace_flexible: false` with the default separators "," and ":". The documents are sampled
uniformly among the tokens our mask allows (the mask, not a model, is what is compared), for at
most STEPS tokens each."""
import numpy as np
import pytest

from glassformer.generate.constrain import json_table, vocabulary_trie
from schemas import SCHEMAS

llguidance = pytest.importorskip("llguidance")
pytestmark = pytest.mark.slow
DOCS = 5
STEPS = 48
IM_END = "<|im_end|>"
LLGUIDANCE_JSON = {"whitespace_flexible": False}


@pytest.fixture(scope="module")
def smol(tmp_path_factory):
    from glassformer import load_tokenizer
    from glassformer.errors import GlassformerError

    try:
        tokenizer = load_tokenizer("smollm2")
    except GlassformerError as err:
        pytest.skip(str(err))
    path = tokenizer.save(tmp_path_factory.mktemp("smollm2") / "tokenizer.json")
    eos = tokenizer.special_tokens[IM_END]
    theirs = llguidance.LLTokenizer(str(path), eos_token=eos)
    return tokenizer, vocabulary_trie(tokenizer, tokenizer.vocab_size), theirs, eos


def their_mask(matcher, vocab: int) -> np.ndarray:
    bits = np.frombuffer(matcher.compute_bitmask(), dtype=np.uint8)
    return np.unpackbits(bits, bitorder="little")[:vocab].astype(bool)


@pytest.mark.parametrize("index", range(len(SCHEMAS)))
def test_masks_equal_llguidance(smol, index):
    tokenizer, trie, theirs, eos = smol
    schema = SCHEMAS[index]
    table = json_table(schema, trie, [eos], tokenizer.encode)
    grammar = llguidance.LLMatcher.grammar_from_json_schema(schema, defaults=LLGUIDANCE_JSON)
    matcher = llguidance.LLMatcher(theirs, grammar)
    assert not matcher.is_error(), matcher.get_error()
    rng = np.random.default_rng(index)
    for _ in range(DOCS):
        matcher.reset()
        state, written = table.start, []
        for _ in range(STEPS):
            ours = table.allowed(state)
            differ = np.flatnonzero(ours != their_mask(matcher, len(ours)))
            assert differ.size == 0, (tokenizer.decode(written), [
                (tokenizer.decode([int(t)]), bool(ours[t])) for t in differ[:8]])
            token = int(rng.choice(np.flatnonzero(ours)))
            if token == eos:
                break
            written.append(token)
            state = table.advance(state, token)
            assert matcher.consume_token(token)
