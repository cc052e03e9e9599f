"""Byte-level BPE round trip on arbitrary Unicode: decode(encode(s)) == s (hypothesis)."""
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings, strategies as st  # noqa: E402

from glassformer.tokenizers.bpe_train import train_bpe  # noqa: E402

# Every code point except lone surrogates (which have no UTF-8 bytes), with unlikely ones mixed in.
ANY_TEXT = st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=200)
MANY_EXAMPLES = settings(max_examples=300, deadline=None)


@pytest.fixture(scope="module")
def small_trained():
    text = "hello world, hello there! 你好，世界。 x = 1234; 🙂🙂 \n\n\tdone " * 20
    return {pattern: train_bpe(text, vocab_size=320, pattern=pattern)
            for pattern in ("gpt2", "llama3", "smollm")}


@MANY_EXAMPLES
@given(text=ANY_TEXT)
def test_gpt2_round_trip(gpt2, text):
    assert gpt2.decode(gpt2.encode(text)) == text


@MANY_EXAMPLES
@given(text=ANY_TEXT, pattern=st.sampled_from(["gpt2", "llama3", "smollm"]))
def test_trained_round_trip(small_trained, text, pattern):
    tok = small_trained[pattern]
    ids = tok.encode(text)
    assert all(0 <= token_id < tok.vocab_size for token_id in ids)
    assert tok.decode(ids) == text


@MANY_EXAMPLES
@given(text=ANY_TEXT)
def test_pretokens_cover_the_text(small_trained, text):
    for tok in small_trained.values():
        assert "".join(tok.pretokenizer.split(text)) == text
