"""WordPiece training: a hand-worked example with pinned tokens and ids, the options, bad input.

The example, worked by hand ("hug hug hug pug pun bun hugs"):

    ids 0-4 [PAD] [UNK] [CLS] [SEP] [MASK]; alphabet b g h n p s u = 5..11;
    continuing pieces as the words meet them: ##u 12, ##g 13 (hug), ##n 14 (pun), ##s 15 (hugs)
    words: hug x3 = h ##u ##g, pug = p ##u ##g, pun = p ##u ##n, bun = b ##u ##n, hugs = h ##u ##g ##s
    pair counts: (##u, ##g) 5, (h, ##u) 4, (p, ##u) 2, (##u, ##n) 2, (b, ##u) 1, (##g, ##s) 1
    merge: ##u ##g -> ##ug 16 (5);  h ##ug -> hug 17 (4);  ##u ##n -> ##un 18 (2)
    then four pairs of count 1, smallest (left id, right id) first:
           b ##un (5, 18) -> bun 19;  p ##ug (9, 16) -> pug 20;  p ##un (9, 18) -> pun 21;
           hug ##s (17, 15) -> hugs 22;  then no pair is left: 23 ids
"""
import pytest

from glassformer.cli import main
from glassformer.errors import GlassformerError
from glassformer.tokenizers.load import load_tokenizer
from glassformer.tokenizers.wordpiece_train import count_words, train_wordpiece

HAND_TEXT = "hug hug hug pug pun bun hugs"
HAND_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "b", "g", "h", "n", "p", "s", "u",
               "##u", "##g", "##n", "##s", "##ug", "hug", "##un", "bun", "pug", "pun", "hugs"]


def tokens_of(tokenizer) -> list[str]:
    return [tokenizer.id_to_piece(token_id) for token_id in range(tokenizer.vocab_size)]


def test_hand_worked_example_tokens_and_ids():
    tok = train_wordpiece(HAND_TEXT, vocab_size=1000)
    assert tokens_of(tok) == HAND_TOKENS     # stopped early: nothing left to merge
    assert tok.encode("Hugs pun") == [2, 22, 21, 3]
    assert tok.tokenize("bung hugging") == ["bun", "##g", "[UNK]"]   # no 'i' in the alphabet


def test_vocab_size_and_min_frequency_stop_the_merges():
    assert tokens_of(train_wordpiece(HAND_TEXT, vocab_size=18)) == HAND_TOKENS[:18]
    assert tokens_of(train_wordpiece(HAND_TEXT, 1000, min_frequency=2)) == HAND_TOKENS[:19]


def test_limit_alphabet_keeps_the_most_frequent_characters():
    # counts: u 7, g 5, h 4, n 2, p 2, b 1, s 1 -> b and s go, and "bun" starts with ##u
    tok = train_wordpiece(HAND_TEXT, vocab_size=1000, limit_alphabet=5)
    assert [t for t in tokens_of(tok)[5:10]] == ["g", "h", "n", "p", "u"]
    assert "b" not in tok.vocab and "##s" not in tok.vocab
    assert tok.tokenize("bun") == ["[UNK]"]


def test_cased_keeps_case_and_accents():
    tok = train_wordpiece("Café café CAFÉ", vocab_size=1000, lowercase=False)
    assert {"Café", "café", "CAFÉ"} <= set(tok.vocab)
    assert train_wordpiece("Café café CAFÉ", vocab_size=1000).tokenize("CAFÉ") == ["cafe"]


def test_cjk_characters_and_punctuation_are_words_of_their_own():
    assert count_words("床前明月光，疑是地上霜。 Don't!") == {
        "床": 1, "前": 1, "明": 1, "月": 1, "光": 1, "，": 1, "疑": 1, "是": 1, "地": 1, "上": 1,
        "霜": 1, "。": 1, "don": 1, "'": 1, "t": 1, "!": 1}
    tok = train_wordpiece("床前明月光，疑是地上霜。", vocab_size=1000)
    assert not [token for token in tok.vocab if token.startswith("##")]


def test_counting_by_whitespace_chunk_gives_the_basic_tokenizers_words(tiny_shakespeare):
    from collections import Counter

    from glassformer.tokenizers.wordpiece_basic import basic_tokenize

    # \x1c, \x0b, \x0c and \x85 are control characters to BERT (removed: a\x0bb is one word),
    # though Python (all four) and Unicode (the last three) call them whitespace;
    # U+F900 is a CJK compatibility ideograph that NFD turns into U+8C48
    text = (tiny_shakespeare[:20_000] + " a\x1cb c\x0bd e\x0cf g\x85h \x0b i"
            + " e\u0301 \u3000x\u00a0y 汉字 \u0301x 漢\u0301x"
            + "\uf900\u0301 ab汉cd，。" + "床前明月光，疑是地上霜。\n" * 3)
    assert count_words(text) == Counter(basic_tokenize(text))


def test_counting_by_chunk_on_random_characters():
    import random
    from collections import Counter

    from glassformer.tokenizers.wordpiece_basic import WHITESPACE, basic_tokenize

    # every kind of character the basic tokenizer treats differently, in random order
    pool = (list(WHITESPACE) + list("\x00\x1c\x7f\u200b\ufffd\u0301\u0308") + list("aZéÉßΣ,.!'$")
            + list("汉字\uf900\u3400\U00020000，。") + list("ｶ가あ１½"))
    rng = random.Random(0)
    for _ in range(20):
        text = "".join(rng.choice(pool) for _ in range(500))
        assert count_words(text) == Counter(basic_tokenize(text))
        assert count_words(text, lowercase=False) == Counter(basic_tokenize(text, lowercase=False))


@pytest.mark.parametrize("text, vocab_size, message", [
    ("", 100, "the training text is empty"),
    (" \n\t\x00 ", 100, "has no words"),
    (HAND_TEXT, 15, "vocab size 15 is too small: before any merge the text needs 16 ids "
                    "(5 special tokens, 7 characters, 4 '##' continuing characters)"),
])
def test_bad_input_is_one_clear_error(text, vocab_size, message):
    with pytest.raises(GlassformerError, match=message.replace("(", r"\(").replace(")", r"\)")):
        train_wordpiece(text, vocab_size)


def test_special_tokens_must_include_berts():
    with pytest.raises(GlassformerError, match=r"must include \[CLS\]"):
        train_wordpiece(HAND_TEXT, 100, special_tokens=["[PAD]", "[UNK]", "[SEP]"])


def test_cli_writes_files_our_loader_reads(tmp_path, capsys):
    data = tmp_path / "corpus.txt"
    data.write_text(HAND_TEXT, encoding="utf-8")
    out_dir = tmp_path / "wp"
    assert main(["tokenizer", "train", "--kind", "wordpiece", "--data", str(data),
                 "--vocab-size", "20", "--out", str(out_dir)]) == 0
    out = capsys.readouterr().out
    assert "20 ids: 5 special + 7 characters + 4 '##' characters + 4 merged pieces (uncased)" in out
    assert {path.name for path in out_dir.iterdir()} == {"vocab.txt", "tokenizer.json",
                                                         "tokenizer_config.json"}
    assert (out_dir / "vocab.txt").read_text(encoding="utf-8").split("\n")[:-1] == HAND_TOKENS[:20]
    for path in (out_dir, out_dir / "vocab.txt", out_dir / "tokenizer.json"):
        assert load_tokenizer(path).encode("hug bun") == [2, 17, 19, 3]


@pytest.mark.parametrize("extra, text, message", [
    ([], "", "is empty: there is nothing to learn a vocabulary from"),
    (["--vocab-size", "10"], HAND_TEXT, "vocab size 10 is too small"),
    (["--pattern", "gpt2"], HAND_TEXT, "--pattern is for --kind bpe"),
    (["--special", "<s>"], HAND_TEXT, "--special is for --kind bpe"),
    (["--limit-alphabet", "0"], HAND_TEXT, "limit_alphabet must be at least 1"),
])
def test_cli_errors_are_one_line(tmp_path, capsys, extra, text, message):
    data = tmp_path / "corpus.txt"
    data.write_text(text, encoding="utf-8")
    args = ["tokenizer", "train", "--kind", "wordpiece", "--data", str(data),
            "--out", str(tmp_path / "wp")]
    assert main(args + (extra if "--vocab-size" in extra else ["--vocab-size", "100"] + extra)) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_cli_bpe_refuses_wordpiece_flags(tmp_path, capsys):
    data = tmp_path / "corpus.txt"
    data.write_text(HAND_TEXT, encoding="utf-8")
    assert main(["tokenizer", "train", "--data", str(data), "--vocab-size", "300", "--out",
                 str(tmp_path / "bpe"), "--cased"]) == 2
    assert "--cased is for --kind wordpiece" in capsys.readouterr().err
