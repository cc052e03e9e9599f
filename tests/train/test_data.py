"""Token files (.npy, memory-mapped, atomic), the 90/10 split and get_batch."""
import json

import numpy as np
import pytest

from glassformer.errors import GlassformerError
from glassformer.train.data import (encode_to_npy, get_batch, load_tokens, prepare_tokens,
                                    split_train_val, token_dtype)


def char_encode(text):
    """A stand-in tokenizer: Unicode code points."""
    return [ord(ch) for ch in text]


def test_token_dtype():
    assert token_dtype(65) == np.uint16
    assert token_dtype(50257) == np.uint16
    assert token_dtype(65536) == np.uint16   # ids 0..65535 still fit
    assert token_dtype(65537) == np.uint32
    assert token_dtype(151936) == np.uint32


def test_encode_to_npy_round_trip_memory_mapped(tmp_path):
    text_path = tmp_path / "poem.txt"
    text_path.write_text("床前明月光\nhello", encoding="utf-8")
    tokens = encode_to_npy(text_path, tmp_path / "ids.npy", encode=char_encode, vocab_size=70000)
    assert isinstance(tokens, np.memmap) and tokens.dtype == np.uint32
    assert tokens.tolist() == char_encode("床前明月光\nhello")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ids.npy", "poem.txt"]  # no temp left
    with pytest.raises(GlassformerError, match=r"outside the vocabulary \[0, 128\)"):
        encode_to_npy(text_path, tmp_path / "ids2.npy", encode=char_encode, vocab_size=128)


def test_prepare_tokens_encodes_once_and_again_when_stale(tmp_path):
    text_path = tmp_path / "a.txt"
    text_path.write_text("abcabc", encoding="utf-8")
    calls = []

    def counting_encode(text):
        calls.append(text)
        return char_encode(text)

    npy = tmp_path / "a.npy"
    first = prepare_tokens(text_path, npy, encode=counting_encode, vocab_size=128)
    second = prepare_tokens(text_path, npy, encode=counting_encode, vocab_size=128)
    assert len(calls) == 1 and first.tolist() == second.tolist()
    assert json.loads((tmp_path / "a.npy.json").read_text())["vocab_size"] == 128
    prepare_tokens(text_path, npy, encode=counting_encode, vocab_size=128, fingerprint="v2")
    assert len(calls) == 2  # a different tokenizer fingerprint makes the ids stale
    text_path.write_text("abcabcd", encoding="utf-8")
    assert prepare_tokens(text_path, npy, encode=counting_encode, vocab_size=128,
                          fingerprint="v2").tolist() == char_encode("abcabcd")
    assert len(calls) == 3


def test_missing_empty_and_bad_files(tmp_path):
    with pytest.raises(GlassformerError, match="does not exist"):
        encode_to_npy(tmp_path / "nope.txt", tmp_path / "x.npy", encode=char_encode,
                      vocab_size=128)
    (tmp_path / "empty.txt").write_bytes(b"")
    with pytest.raises(GlassformerError, match="is empty"):
        prepare_tokens(tmp_path / "empty.txt", tmp_path / "x.npy", encode=char_encode,
                       vocab_size=128)
    (tmp_path / "latin1.txt").write_bytes(b"caf\xe9")
    with pytest.raises(GlassformerError, match="not UTF-8"):
        encode_to_npy(tmp_path / "latin1.txt", tmp_path / "x.npy", encode=char_encode,
                      vocab_size=128)
    np.save(tmp_path / "floats.npy", np.zeros(3))
    with pytest.raises(GlassformerError, match="uint16/uint32"):
        load_tokens(tmp_path / "floats.npy")
    np.save(tmp_path / "obj.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(GlassformerError, match="not a valid .npy"):
        load_tokens(tmp_path / "obj.npy")  # a pickled object array is refused, never loaded


def test_split_is_90_10_by_position():
    tokens = np.arange(1000, dtype=np.uint16)
    train, val = split_train_val(tokens)
    assert train.tolist() == list(range(900)) and val.tolist() == list(range(900, 1000))


def test_get_batch_shapes_targets_and_reproducibility():
    data = np.arange(500, dtype=np.uint16)
    x, y = get_batch(data, 12, 64, np.random.default_rng(7))
    assert x.shape == y.shape == (12, 64) and x.dtype == y.dtype == np.int64
    assert x.flags.c_contiguous and y.flags.c_contiguous
    np.testing.assert_array_equal(y, x + 1)   # ids are positions here: y is x shifted by one
    np.testing.assert_array_equal(np.diff(x, axis=1), 1)
    assert x[:, 0].min() >= 0 and x[:, -1].max() <= 498
    x2, y2 = get_batch(data, 12, 64, np.random.default_rng(7))
    np.testing.assert_array_equal(x, x2)
    np.testing.assert_array_equal(y, y2)
    starts = np.random.default_rng(7).integers(0, 500 - 64, size=12)
    np.testing.assert_array_equal(x[:, 0], starts)  # the documented draw, so it can be replayed


def test_get_batch_from_memory_mapped_tokens(tmp_path):
    text_path = tmp_path / "t.txt"
    text_path.write_text("abcdefghij" * 10, encoding="utf-8")
    tokens = prepare_tokens(text_path, tmp_path / "t.npy", encode=char_encode, vocab_size=128)
    x, y = get_batch(tokens, 3, 8, np.random.default_rng(0))
    assert type(x) is np.ndarray and x.dtype == np.int64
    np.testing.assert_array_equal(x[:, 1:], y[:, :-1])


def test_get_batch_errors():
    val = np.arange(20, dtype=np.uint16)
    with pytest.raises(GlassformerError,
                       match="block size 64 needs at least 65 tokens in the val split, got 20"):
        get_batch(val, 4, 64, np.random.default_rng(0), split="val")
    with pytest.raises(GlassformerError, match="np.random.Generator"):
        get_batch(val, 4, 8, np.random.RandomState(0))
    # exactly block_size + 1 tokens: the only window is the whole array
    x, y = get_batch(val, 2, 19, np.random.default_rng(0))
    assert x.tolist() == [list(range(19))] * 2
