"""glassformer.translate (tasks/translate.py): ragged sources batched give what each gives alone,
ids in give ids out, and bad inputs are one-line errors."""
import numpy as np
import pytest

from glassformer.errors import GlassformerError
from glassformer.models import gpt2, seq2seq
from glassformer.models.model import Model
from glassformer.tasks.translate import translate

V, EOS, START, PAD = 5, 1, 2, 0


def tiny_seq2seq(seed=0) -> Model:
    cfg = seq2seq.Seq2SeqConfig(vocab_size=V, max_seq_len=8, n_layer=1, n_head=2, d_model=16,
                                pad_id=PAD, eos_id=EOS, decoder_start_id=START)
    return Model(cfg, seq2seq.init_params(cfg, np.random.default_rng(seed)))


def test_ragged_sources_batched_equal_each_alone():
    model = tiny_seq2seq()
    ragged = [[3, 4, 3], [4], [3, 3, 4, 4, 3]]
    together = translate(model, ragged, max_new_tokens=5)
    alone = [translate(model, np.array(row), max_new_tokens=5) for row in ragged]
    assert together == alone                           # padding masked: same as one by one
    assert translate(model, [3, 4, 3], max_new_tokens=5) == alone[0]
    assert all(EOS not in row for row in together)     # an output stops before its </s>


def test_bad_inputs_are_one_line_errors():
    model = tiny_seq2seq()
    with pytest.raises(GlassformerError, match="beam width"):
        translate(model, [[3, 4]], beam=0)
    with pytest.raises(GlassformerError, match="longer than the model's context"):
        translate(model, [[3] * 9])
    with pytest.raises(GlassformerError, match="no pair tokenizer"):
        translate(model, "hello")
    with pytest.raises(GlassformerError, match="no inputs"):
        translate(model, [])


def test_a_decoder_only_model_is_refused():
    cfg = gpt2.GPT2Config(vocab_size=8, max_seq_len=8, n_layer=1, n_head=1, d_model=8)
    lm = Model(cfg, gpt2.init_params(cfg, np.random.default_rng(0)))
    with pytest.raises(GlassformerError, match="translate needs an encoder-decoder"):
        translate(lm, [[1, 2]])
