"""GPT-2 byte-level BPE: identical ids to tiktoken (built offline) and HF tokenizers, line by line."""
import base64

import pytest

from glassformer import load_tokenizer
from glassformer.errors import GlassformerError

SPECIAL_LINES = ["<|endoftext|>", "end.<|endoftext|>Start", "a <|endoftext|> b<|endoftext|>"]


def test_corpus_is_big_and_varied(parity_corpus):
    assert len(parity_corpus) >= 2000
    assert "" in parity_corpus
    assert any("\u4e00" <= ch <= "\u9fff" for line in parity_corpus for ch in line)


def test_ids_match_tiktoken(gpt2, tiktoken_gpt2, parity_corpus):
    mismatches = [line for line in parity_corpus + SPECIAL_LINES
                  if gpt2.encode(line) != tiktoken_gpt2.encode_ordinary(line)]
    assert mismatches == []


def test_a_corpus_mentioning_endoftext_matches_encode_ordinary(gpt2, tiktoken_gpt2, parity_corpus):
    text = "<|endoftext|>".join(parity_corpus[:400]) + " <|endoftext|>\n<|endoftext"
    ids = gpt2.encode(text)
    assert ids == tiktoken_gpt2.encode_ordinary(text)
    assert 50256 not in ids


def test_ids_match_hf_tokenizers(gpt2, hf_gpt2, parity_corpus):
    expected = [encoding.ids for encoding in hf_gpt2.encode_batch(parity_corpus)]
    mismatches = [line for line, ids in zip(parity_corpus, expected) if gpt2.encode(line) != ids]
    assert mismatches == []


def test_allowed_special_tokens_match_both_references(gpt2, tiktoken_gpt2, hf_gpt2):
    for line in SPECIAL_LINES:
        ids = gpt2.encode(line, allowed_special="all")
        assert ids == tiktoken_gpt2.encode(line, allowed_special="all")
        assert ids == hf_gpt2.encode(line).ids
        assert gpt2.encode(line, allowed_special={"<|endoftext|>"}) == ids
        assert gpt2.encode(line) == gpt2.encode_ordinary(line) == \
            tiktoken_gpt2.encode_ordinary(line)


def test_allowed_special_names_only_special_tokens(gpt2):
    with pytest.raises(GlassformerError, match="not a special token"):
        gpt2.encode("hi", allowed_special={"<|im_end|>"})
    with pytest.raises(GlassformerError, match='"all" or a set'):
        gpt2.encode("hi", allowed_special="<|endoftext|>")


def test_decode_round_trips_and_matches_references(gpt2, tiktoken_gpt2, hf_gpt2, parity_corpus):
    for line in parity_corpus + SPECIAL_LINES:
        ids = gpt2.encode(line, allowed_special="all")
        assert gpt2.decode(ids) == line
        assert tiktoken_gpt2.decode(ids) == line
    # A cut character: both decoders replace the orphan bytes with U+FFFD.
    cut = gpt2.encode("汉")[:1]
    assert gpt2.decode(cut) == tiktoken_gpt2.decode(cut) == hf_gpt2.decode(cut)


def test_all_of_tiny_shakespeare_matches_tiktoken(gpt2, tiktoken_gpt2, tiny_shakespeare):
    ids = gpt2.encode(tiny_shakespeare)
    assert ids == tiktoken_gpt2.encode_ordinary(tiny_shakespeare)
    assert gpt2.decode(ids) == tiny_shakespeare


def test_tiktoken_file_loads_with_the_same_ids(tmp_path, gpt2_ranks, tiktoken_gpt2, parity_corpus):
    """A .tiktoken file has ranks but no merges: the merges are rebuilt from the ranks."""
    path = tmp_path / "gpt2.tiktoken"
    lines = [f"{base64.b64encode(token).decode()} {rank}" for token, rank in gpt2_ranks.items()]
    path.write_text("\n".join(lines) + "\n", encoding="ascii")
    tok = load_tokenizer(path, special_tokens={"<|endoftext|>": 50256})
    assert tok.vocab_size == 50257
    sample = parity_corpus[::4] + SPECIAL_LINES
    assert [tok.encode(line, allowed_special="all") for line in sample] == \
        [tiktoken_gpt2.encode(line, allowed_special="all") for line in sample]


@pytest.mark.parametrize("text, pieces", [
    ("Hello world", ["Hello", "Ġworld"]),
    ("  x", ["Ġ", "Ġx"]),
    ("don't", ["don", "'t"]),
])
def test_pieces_are_vocab_spellings(gpt2, text, pieces):
    assert [gpt2.id_to_piece(token_id) for token_id in gpt2.encode(text)] == pieces
