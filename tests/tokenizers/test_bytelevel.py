"""The byte <-> character table, readable pieces, and the pre-tokenizer patterns."""
import pytest

from glassformer.errors import GlassformerError
from glassformer.tokenizers.bytelevel import bytes_to_unicode, readable_pieces, unicode_to_bytes
from glassformer.tokenizers.pretokenize import PreTokenizer


def test_table_is_a_bijection_onto_printable_characters():
    table = bytes_to_unicode()
    assert sorted(table) == list(range(256))
    assert len(set(table.values())) == 256
    assert all(ch.isprintable() and not ch.isspace() for ch in table.values())
    assert unicode_to_bytes()["Ġ"] == ord(" ")
    assert "".join(table[b] for b in "汉".encode()) == "æ±ī"


def test_readable_pieces_group_split_characters():
    pieces = [b" ", "汉".encode()[:1], "汉".encode()[1:], "字".encode(), b"!"]
    shown = [(p.text, p.part, p.parts) for p in readable_pieces(pieces)]
    assert shown == [(" ", 1, 1), ("汉", 1, 2), ("汉", 2, 2), ("字", 1, 1), ("!", 1, 1)]


def test_readable_pieces_show_a_cut_character_as_replacement():
    assert [p.text for p in readable_pieces(["汉".encode()[:2]])] == ["\ufffd"]


@pytest.mark.parametrize("name, text, words", [
    ("gpt2", "Hello world!!  x", ["Hello", " world", "!!", " ", " x"]),
    ("gpt2", "I'M 12345", ["I", "'", "M", " 12345"]),
    ("llama3", "I'M 12345", ["I", "'M", " ", "123", "45"]),
    ("llama3", "a\n\n b", ["a", "\n\n", " b"]),
    ("smollm", "a  12", ["a", "  ", "1", "2"]),
])
def test_named_patterns(name, text, words):
    assert PreTokenizer.named(name).split(text) == words


def test_bad_patterns_are_errors():
    with pytest.raises(GlassformerError, match="unknown pre-tokenizer"):
        PreTokenizer.named("bert")
    with pytest.raises(GlassformerError, match="does not compile"):
        PreTokenizer("(unclosed")
