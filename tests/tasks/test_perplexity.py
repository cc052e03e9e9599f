"""glassformer.perplexity (tasks/perplexity.py): the loss is the mean cross-entropy of the
windows it names, perplexity its exp, bits per byte from the tokens' bytes, and the splits."""
import math

import numpy as np
import pytest

from glassformer.errors import GlassformerError
from glassformer.models import gpt2
from glassformer.models.model import Model
from glassformer.ops.cross_entropy import cross_entropy_forward
from glassformer.tasks.perplexity import count_windows, evaluate_ids, perplexity, select_split
from glassformer.tokenizers.char import CharTokenizer

TEXT = "to be or not to be, that is the question"
LOSS_TOL = 1e-6   # float32 losses summed in float64, over a handful of windows


@pytest.fixture
def model() -> Model:
    tokenizer = CharTokenizer.from_text(TEXT)
    cfg = gpt2.GPT2Config(vocab_size=tokenizer.vocab_size, max_seq_len=8, n_layer=1, n_head=2,
                          d_model=8)
    return Model(cfg, gpt2.init_params(cfg, np.random.default_rng(0)), tokenizer)


def test_loss_is_the_mean_over_non_overlapping_windows(model):
    ids = np.array(model.tokenizer.encode(TEXT))
    result = evaluate_ids(model, ids, block_size=8, batch_size=2)
    n = count_windows(len(ids), 8)                                   # windows of 9 ids
    windows = ids[:n * 8 + 1]
    logits, _ = model.forward(windows[:-1].reshape(n, 8))
    loss, _ = cross_entropy_forward(logits, windows[1:].reshape(n, 8))
    assert result.tokens == n * 8
    assert math.isclose(result.loss, float(loss), rel_tol=LOSS_TOL)
    assert math.isclose(result.perplexity, math.exp(result.loss))


def test_perplexity_of_a_text_counts_its_bytes(model):
    result = perplexity(model, TEXT, block_size=8)
    assert result.bytes == result.tokens                             # ASCII: one byte a char
    assert math.isclose(result.bits_per_byte, result.loss / math.log(2), rel_tol=LOSS_TOL)


def test_splits_are_training_s_and_bad_sizes_are_one_line(model):
    ids = np.arange(100)
    train, val = select_split(ids, "train"), select_split(ids, "val")
    assert len(train) + len(val) == 100 and len(val) == 10
    with pytest.raises(GlassformerError, match="split must be one of all, train, val"):
        select_split(ids, "test")
    with pytest.raises(GlassformerError, match="longer than the model's context"):
        perplexity(model, TEXT, block_size=9)
    with pytest.raises(GlassformerError, match="at least 1"):
        perplexity(model, TEXT, batch_size=0)
    with pytest.raises(GlassformerError, match="at least 9 are needed"):
        perplexity(model, "to be", block_size=8)
