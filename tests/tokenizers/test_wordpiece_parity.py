"""BERT WordPiece (all-MiniLM-L6-v2, uncased): identical ids to transformers' BertTokenizerFast,
for single texts, pairs, padding and truncation, loaded from tokenizer.json and from vocab.txt.

note: transformers treats an empty second text as "no pair", so pairs here are non-empty.
"""
import shutil

import pytest

from glassformer import load_tokenizer

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def hf_bert(minilm_dir):
    return transformers.BertTokenizerFast.from_pretrained(str(minilm_dir))


@pytest.fixture(scope="module")
def hf_bert_vocab_txt(minilm_dir, tmp_path_factory):
    """The reference built from vocab.txt alone (a folder holding only that file)."""
    folder = tmp_path_factory.mktemp("vocab_txt_only")
    shutil.copy(minilm_dir / "vocab.txt", folder / "vocab.txt")
    return transformers.BertTokenizerFast.from_pretrained(str(folder))


@pytest.fixture(scope="module")
def bert(minilm_dir):
    return load_tokenizer(minilm_dir)  # tokenizer.json wins over vocab.txt in the same folder


def test_single_texts_match(bert, hf_bert, parity_corpus):
    expected = hf_bert(parity_corpus)["input_ids"]
    mismatches = [line for line, ids in zip(parity_corpus, expected) if bert.encode(line) != ids]
    assert mismatches == []


def test_vocab_txt_layout_matches(minilm_dir, hf_bert_vocab_txt, parity_corpus):
    bert_from_txt = load_tokenizer(minilm_dir / "vocab.txt")
    sample = parity_corpus[::3]
    expected = hf_bert_vocab_txt(sample)["input_ids"]
    assert [bert_from_txt.encode(line) for line in sample] == expected


def test_wordpiece_tokens_match(bert, hf_bert, parity_corpus):
    for line in parity_corpus[::5]:
        assert bert.tokenize(line) == hf_bert.tokenize(line)


def test_pairs_match_with_token_type_ids(bert, hf_bert, parity_corpus):
    lines = [line for line in parity_corpus if line.strip()]
    firsts, seconds = lines[0::2], lines[1::2]
    expected = hf_bert(firsts[:len(seconds)], seconds)
    for k, (first, second) in enumerate(zip(firsts, seconds)):
        encoding = bert.encode_plus(first, second)
        assert encoding.ids == expected["input_ids"][k]
        assert encoding.type_ids == expected["token_type_ids"][k]


@pytest.mark.parametrize("max_length", [3, 4, 5, 8, 9, 16, 33])
def test_pair_truncation_and_padding_to_max_length(bert, hf_bert, parity_corpus, max_length):
    lines = [line for line in parity_corpus if line.strip()][::7]
    firsts, seconds = lines[0::2], lines[1::2][::-1]  # reversed so lengths vary both ways
    count = min(len(firsts), len(seconds))
    expected = hf_bert(firsts[:count], seconds[:count], max_length=max_length, truncation=True,
                       padding="max_length")
    got = bert.encode_batch(firsts[:count], seconds[:count], max_length=max_length,
                            truncation=True, padding="max_length")
    assert [e.ids for e in got] == expected["input_ids"]
    assert [e.type_ids for e in got] == expected["token_type_ids"]
    assert [e.attention_mask for e in got] == expected["attention_mask"]


@pytest.mark.parametrize("max_length", [2, 7, 24])
def test_single_truncation_and_longest_padding(bert, hf_bert, parity_corpus, max_length):
    sample = parity_corpus[::9]
    expected = hf_bert(sample, max_length=max_length, truncation=True, padding="longest")
    got = bert.encode_batch(sample, max_length=max_length, truncation=True, padding="longest")
    assert [e.ids for e in got] == expected["input_ids"]
    assert [e.attention_mask for e in got] == expected["attention_mask"]
    assert [e.type_ids for e in got] == expected["token_type_ids"]


def test_decode_matches(bert, hf_bert, parity_corpus):
    for line in parity_corpus[::5]:
        ids = hf_bert(line)["input_ids"]
        assert bert.decode(ids) == hf_bert.decode(ids)
        assert bert.decode(ids, skip_special_tokens=True) == \
            hf_bert.decode(ids, skip_special_tokens=True)


def test_special_tokens_in_text_stay_whole_when_allowed(bert, hf_bert):
    text = "[CLS] question? [SEP] answer [MASK] here[SEP]"
    assert bert.encode(text, allowed_special="all") == hf_bert(text)["input_ids"]


def test_special_tokens_in_text_are_text_by_default(bert, hf_bert):
    text = "[CLS] question? [SEP] answer [MASK] here[SEP]"
    ids = bert.encode(text)
    assert ids == hf_bert(text, split_special_tokens=True)["input_ids"]
    inner = set(ids[1:-1])   # [CLS] and [SEP] at the ends are inserted by id
    assert not inner & set(bert.special_tokens.values())
