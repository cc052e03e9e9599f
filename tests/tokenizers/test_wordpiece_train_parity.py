"""A trained WordPiece against the references, on the 2,000-line mixed corpus (wordpiece_mixed_corpus.py).

- transformers' BertTokenizerFast reads our trained folder (and its vocab.txt alone) and gives the
  same ids as our WordPiece on every line, uncased and cased, and on the shared parity corpus
  (emoji, other scripts: [UNK]s);
- HF tokenizers' WordPieceTrainer learns the same vocabulary: token for token, id for id, once its
  numbering of the '##' characters (its hash-map order, different each run) is given to ours;
  with our own numbering the tie-breaks differ near the end, so we require 99% of the tokens shared.
"""
import shutil
from collections import Counter

import pytest

from glassformer.tokenizers.load import load_tokenizer
from glassformer.tokenizers.wordpiece_train import (BERT_SPECIALS, count_words, learn_vocab,
                                                    train_wordpiece, write_bert_config)

transformers = pytest.importorskip("transformers")
hf_tokenizers = pytest.importorskip("tokenizers")

VOCAB_SIZE = 5000


@pytest.fixture(scope="module")
def mixed_lines(tiny_shakespeare, tang_poems) -> list[str]:
    from wordpiece_mixed_corpus import build_mixed_corpus  # tests/tokenizers is on sys.path

    lines = build_mixed_corpus(tiny_shakespeare, tang_poems)
    assert len(lines) == 2000
    return lines


@pytest.fixture(scope="module", params=[True, False], ids=["uncased", "cased"])
def trained(request, mixed_lines, tmp_path_factory):
    """(our tokenizer, its folder, lowercase) trained on the mixed corpus."""
    lowercase = request.param
    tok = train_wordpiece("\n".join(mixed_lines), VOCAB_SIZE, lowercase=lowercase)
    folder = tmp_path_factory.mktemp("wordpiece")
    tok.save(folder)
    write_bert_config(folder, tok)
    return tok, folder, lowercase


def bert_from_vocab_txt(folder, lowercase: bool, tmp_path_factory):
    """BertTokenizerFast built from vocab.txt alone (a folder holding only that file).

    note: from_pretrained, because the constructor's argument is vocab_file in transformers 4
    and vocab in 5 (which ignores vocab_file: every id would be [UNK]).
    """
    only = tmp_path_factory.mktemp("vocab_txt_only")
    shutil.copy(folder / "vocab.txt", only / "vocab.txt")
    return transformers.BertTokenizerFast.from_pretrained(str(only), do_lower_case=lowercase)


def hf_train(lines: list[str], vocab_size: int, *, lowercase: bool = True, **options) -> list[str]:
    """HF tokenizers' WordPieceTrainer over `lines`, tokens in id order."""
    reference = hf_tokenizers.Tokenizer(hf_tokenizers.models.WordPiece(unk_token="[UNK]"))
    reference.normalizer = hf_tokenizers.normalizers.BertNormalizer(lowercase=lowercase)
    reference.pre_tokenizer = hf_tokenizers.pre_tokenizers.BertPreTokenizer()
    trainer = hf_tokenizers.trainers.WordPieceTrainer(
        vocab_size=vocab_size, special_tokens=list(BERT_SPECIALS), show_progress=False, **options)
    reference.train_from_iterator(lines, trainer)
    vocab = reference.get_vocab()
    return sorted(vocab, key=vocab.get)


def continuing_characters(tokens: list[str]) -> tuple[str, ...]:
    return tuple(token for token in tokens if token.startswith("##") and len(token) == 3)


def test_bert_tokenizer_fast_gives_our_ids(trained, mixed_lines, tmp_path_factory):
    tok, folder, lowercase = trained
    from_vocab_txt = bert_from_vocab_txt(folder, lowercase, tmp_path_factory)
    from_folder = transformers.BertTokenizerFast.from_pretrained(str(folder))
    ours = [tok.encode(line) for line in mixed_lines]
    assert ours == from_vocab_txt(mixed_lines)["input_ids"]
    assert ours == from_folder(mixed_lines)["input_ids"]
    assert sum(ids.count(1) for ids in ours) < 50      # the vocabulary covers its own corpus


def test_auto_tokenizer_and_our_loader_read_the_folder(trained, mixed_lines):
    tok, folder, lowercase = trained
    sample = mixed_lines[::20]
    expected = [tok.encode(line) for line in sample]
    for path in (folder, folder / "vocab.txt"):
        assert [load_tokenizer(path).encode(line) for line in sample] == expected
    if lowercase:  # note: AutoTokenizer imports torch (seconds); once is enough
        auto = transformers.AutoTokenizer.from_pretrained(str(folder))
        assert auto(sample)["input_ids"] == expected


def test_parity_corpus_with_unknown_characters(trained, parity_corpus, tmp_path_factory):
    tok, folder, lowercase = trained
    if not lowercase:
        pytest.skip("the uncased run covers the [UNK] paths; cased is checked on the mixed corpus")
    reference = bert_from_vocab_txt(folder, lowercase, tmp_path_factory)
    assert [tok.encode(line) for line in parity_corpus] == reference(parity_corpus)["input_ids"]


def untied_limit(word_counts: dict[str, int], near: int) -> int:
    """An alphabet size <= near whose cut falls between two different character counts.

    HF drops the rarest characters with an unstable sort: at a cut between equal counts, which
    ones it keeps is not defined, so the exact comparison uses a cut without a tie.
    """
    char_counts = Counter()
    for word, count in word_counts.items():
        for ch in word:
            char_counts[ch] += count
    ranked = sorted(char_counts.values(), reverse=True)
    return next(k for k in range(near, 0, -1) if ranked[k - 1] != ranked[k])


@pytest.mark.parametrize("option", ["defaults", "min_frequency", "limit_alphabet"])
def test_hf_trainer_vocabulary_reproduced_exactly(mixed_lines, option):
    word_counts = count_words("\n".join(mixed_lines))
    options = {"defaults": {}, "min_frequency": {"min_frequency": 3},
               "limit_alphabet": {"limit_alphabet": untied_limit(word_counts, 1000)}}[option]
    expected = hf_train(mixed_lines, VOCAB_SIZE, **options)
    tokens = learn_vocab(word_counts, VOCAB_SIZE, continuing_order=continuing_characters(expected),
                         **options)
    assert tokens == expected


def test_hf_trainer_vocabulary_shared_with_our_numbering(trained, mixed_lines):
    tok, _, lowercase = trained
    expected = hf_train(mixed_lines, VOCAB_SIZE, lowercase=lowercase)
    assert len(set(tok.vocab) & set(expected)) >= 0.99 * len(expected)
