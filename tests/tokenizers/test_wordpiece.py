"""WordPiece pieces by hand: basic tokenizer, greedy longest match, truncation rule, save/load."""
import pytest

from glassformer.errors import GlassformerError
from glassformer.tokenizers.wordpiece import WordPieceTokenizer, truncated_lengths, wordpiece_word
from glassformer.tokenizers.wordpiece_basic import basic_tokenize

TOY_VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "un", "##aff", "##able", "a", "##ff",
             "hello", ",", "!", "世", "界", "cafe", "'", "t", "don", "##s"]


@pytest.fixture
def toy():
    return WordPieceTokenizer({token: token_id for token_id, token in enumerate(TOY_VOCAB)})


@pytest.mark.parametrize("text, words", [
    ("Héllo, 世界!", ["hello", ",", "世", "界", "!"]),
    ("don't", ["don", "'", "t"]),
    ("  tabs\tand\nnewlines  ", ["tabs", "and", "newlines"]),
    ("a\x00b\ufffdc\u200bd", ["abcd"]),           # NUL, U+FFFD and format characters vanish
    ("CAFÉ ΟΔΟΣ", ["cafe", "οδοσ"]),              # per-character lower-casing: no final ς
    ("x$y+z", ["x", "$", "y", "+", "z"]),          # ASCII symbols count as punctuation
])
def test_basic_tokenize(text, words):
    assert basic_tokenize(text) == words


def test_cased_basic_tokenize_keeps_accents():
    assert basic_tokenize("Héllo", lowercase=False) == ["Héllo"]


def test_greedy_longest_match_first(toy):
    assert wordpiece_word("unaffable", toy.vocab) == ["un", "##aff", "##able"]
    # "aff" is not a word start; "a" + "##ff" is the longest-first cover
    assert wordpiece_word("aff", toy.vocab) == ["a", "##ff"]


def test_one_uncoverable_piece_makes_the_whole_word_unknown(toy):
    assert wordpiece_word("unaffablez", toy.vocab) == ["[UNK]"]


def test_words_over_the_length_limit_are_unknown(toy):
    assert wordpiece_word("a" * 101, toy.vocab) == ["[UNK]"]
    assert wordpiece_word("un", toy.vocab, max_chars=1) == ["[UNK]"]


def test_encode_pair_padding(toy):
    encoding = toy.encode_plus("unaffable", "hello!", max_length=12, padding="max_length")
    assert encoding.ids == [2, 5, 6, 7, 3, 10, 12, 3, 0, 0, 0, 0]
    assert encoding.type_ids == [0, 0, 0, 0, 0, 1, 1, 1, 0, 0, 0, 0]
    assert encoding.attention_mask == [1] * 8 + [0] * 4


@pytest.mark.parametrize("len_a, len_b, budget, kept", [
    (10, None, 4, (4, None)),   # one sequence keeps its head
    (3, 4, 10, (3, 4)),         # fits: nothing cut
    (2, 9, 6, (2, 4)),          # the longer one absorbs the whole cut
    (9, 2, 6, (4, 2)),
    (5, 5, 5, (2, 3)),          # equal: halves, the second gets the odd one
    (7, 6, 5, (3, 2)),          # both cut: the longer gets the odd one
])
def test_longest_first_truncation(len_a, len_b, budget, kept):
    assert truncated_lengths(len_a, len_b, budget) == kept


def test_truncation_errors(toy):
    with pytest.raises(GlassformerError, match="truncation needs max_length"):
        toy.encode_plus("hello", truncation=True)
    with pytest.raises(GlassformerError, match="cannot even hold the 3 special tokens"):
        toy.encode_plus("hello", "hello", max_length=2, truncation=True)


def test_decode_glues_continuations_and_tidies_punctuation(toy):
    ids = toy.encode("unaffable, hello!")
    assert toy.decode(ids) == "[CLS] unaffable, hello! [SEP]"
    assert toy.decode(ids, skip_special_tokens=True) == "unaffable, hello!"


def test_missing_special_token_is_an_error():
    with pytest.raises(GlassformerError, match=r"cls_token '\[CLS\]' is not in the vocabulary"):
        WordPieceTokenizer({"[UNK]": 0, "[SEP]": 1, "[PAD]": 2})


def test_save_load_identity(toy, tmp_path):
    toy.save(tmp_path)
    assert (tmp_path / "vocab.txt").read_text(encoding="utf-8").split("\n")[:3] == \
        ["[PAD]", "[UNK]", "[CLS]"]
    again = WordPieceTokenizer.load(tmp_path)
    assert again.vocab == toy.vocab
    text = "Unaffable, don't! 世界 café"
    assert again.encode_plus(text, "hello").ids == toy.encode_plus(text, "hello").ids
    (tmp_path / "tokenizer.json").unlink()
    assert WordPieceTokenizer.load(tmp_path).encode(text) == toy.encode(text)


def test_saved_tokenizer_json_loads_in_hf_tokenizers(minilm_dir, tmp_path, parity_corpus):
    hf_tokenizers = pytest.importorskip("tokenizers")
    bert = WordPieceTokenizer.load(minilm_dir)
    reference = hf_tokenizers.Tokenizer.from_file(str(bert.save(tmp_path)))
    for line in parity_corpus[::10]:
        assert reference.encode(line).ids == bert.encode(line)
