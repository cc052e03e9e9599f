"""CharTokenizer: round trips, vocabulary order, special tokens, save/load identity, clear errors."""
import json

import pytest

from glassformer.errors import GlassformerError
from glassformer.tokenizers.char import CharTokenizer


def test_vocabulary_is_sorted_distinct_characters():
    tok = CharTokenizer.from_text("hello")
    assert tok.chars == ["e", "h", "l", "o"]
    assert tok.vocab_size == 4
    assert tok.encode("hole") == [1, 3, 2, 0]


@pytest.mark.parametrize("text", ["", "a", "🙂", "床前明月光\n疑是地上霜", "tab\there  spaces\n\n"])
def test_round_trip(text):
    tok = CharTokenizer.from_text(text + "x")
    assert tok.decode(tok.encode(text)) == text


def test_round_trip_on_a_corpus_file(tiny_shakespeare):
    text = tiny_shakespeare[:20_000]
    tok = CharTokenizer.from_text(text)
    ids = tok.encode(text)
    assert len(ids) == len(text)
    assert tok.decode(ids) == text


def test_special_tokens_follow_the_characters_and_are_matched_whole():
    tok = CharTokenizer.from_text("ab", special_tokens=["<|endoftext|>"])
    assert tok.special_tokens == {"<|endoftext|>": 2}
    assert tok.vocab_size == 3
    assert tok.encode("ab<|endoftext|>ba", allowed_special="all") == [0, 1, 2, 1, 0]
    assert tok.decode([0, 2, 1]) == "a<|endoftext|>b"


def test_special_tokens_in_text_are_characters_unless_allowed():
    tok = CharTokenizer.from_text("<|endoftext|>ab", special_tokens=["<|endoftext|>"])
    ids = tok.encode("a<|endoftext|>")
    assert len(ids) == 14 and tok.special_tokens["<|endoftext|>"] not in ids
    assert tok.decode(ids) == "a<|endoftext|>"
    assert tok.encode("a<|endoftext|>", allowed_special={"<|endoftext|>"}) == \
        [tok.encode("a")[0], tok.special_tokens["<|endoftext|>"]]


def test_unknown_character_error_names_it_and_its_position():
    tok = CharTokenizer.from_text("abc")
    with pytest.raises(GlassformerError, match=r"'z' \(U\+007A LATIN SMALL LETTER Z\) at position 3"):
        tok.encode("abcz")


def test_unknown_character_position_counts_special_tokens():
    tok = CharTokenizer.from_text("ab", special_tokens=["<s>"])
    with pytest.raises(GlassformerError, match="at position 5"):
        tok.encode("a<s>b\t", allowed_special="all")


@pytest.mark.parametrize("bad_id", [3, -1, 10**9])
def test_decode_rejects_ids_outside_the_vocabulary(bad_id):
    tok = CharTokenizer.from_text("abc")
    with pytest.raises(GlassformerError, match=f"id {bad_id} at position 1 is outside the vocabulary"):
        tok.decode([0, bad_id])


def test_save_load_identity(tmp_path):
    tok = CharTokenizer.from_text("To be, or not to be 🙂\n", special_tokens=["<|endoftext|>"])
    written = tok.save(tmp_path)
    assert written.name == "tokenizer.json"
    layout = json.loads(written.read_text(encoding="utf-8"))
    assert layout["type"] == "char"
    again = CharTokenizer.load(tmp_path)
    assert again.chars == tok.chars
    assert again.special_tokens == tok.special_tokens
    text = "not to be<|endoftext|>🙂"
    assert again.encode(text, allowed_special="all") == tok.encode(text, allowed_special="all")


def test_load_rejects_other_layouts(tmp_path):
    (tmp_path / "tokenizer.json").write_text('{"model": {"type": "BPE"}}', encoding="utf-8")
    with pytest.raises(GlassformerError, match="is not a char tokenizer"):
        CharTokenizer.load(tmp_path)


def test_load_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(GlassformerError, match="file not found"):
        CharTokenizer.load(tmp_path / "nowhere")


def test_from_text_rejects_empty_text():
    with pytest.raises(GlassformerError, match="empty text"):
        CharTokenizer.from_text("")
