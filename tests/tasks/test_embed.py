"""glassformer.embed (tasks/embed.py): unit-length vectors, padding and batch size change
nothing, texts are cut at max_length, and the cosine similarity of unit vectors."""
import json

import numpy as np
import pytest

from glassformer.errors import GlassformerError
from glassformer.models import bert
from glassformer.models.model import Model
from glassformer.tasks.embed import MAX_LENGTH, cosine_similarity, embed, max_length_of
from glassformer.tokenizers.wordpiece import WordPieceTokenizer

WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "on", "a", "mat"]
UNIT_TOL = 1e-5   # float32 norm of a 16-wide vector
SAME_TOL = 1e-5   # float32: the same row computed in a batch of another width


@pytest.fixture
def model() -> Model:
    tokenizer = WordPieceTokenizer({word: i for i, word in enumerate(WORDS)})
    cfg = bert.BertConfig(vocab_size=len(WORDS), max_seq_len=16, n_layer=1, n_head=2, d_model=16,
                          d_ff=32)
    return Model(cfg, bert.init_params(cfg, np.random.default_rng(0)), tokenizer)


def test_vectors_have_unit_length_and_do_not_depend_on_the_batch(model):
    texts = ["the cat sat on a mat", "a cat", "the mat"]
    together = embed(model, texts)                                  # padded to the longest
    alone = np.concatenate([embed(model, [text]) for text in texts])
    assert together.shape == (3, 16) and together.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(together, axis=1), 1.0, atol=UNIT_TOL)
    np.testing.assert_allclose(together, alone, atol=SAME_TOL)      # padding masked out
    np.testing.assert_allclose(embed(model, texts, batch_size=2), together, atol=SAME_TOL)
    np.testing.assert_allclose(cosine_similarity(together), together @ together.T, atol=UNIT_TOL)


def test_texts_are_cut_at_max_length(model):
    # [CLS] the cat [SEP]: max_length 4 keeps "the cat" of "the cat sat on a mat"
    cut = embed(model, ["the cat sat on a mat"], max_length=4)
    np.testing.assert_allclose(cut, embed(model, ["the cat"]), atol=SAME_TOL)


def test_max_length_comes_from_sentence_bert_config(tmp_path):
    assert max_length_of(tmp_path) == MAX_LENGTH
    (tmp_path / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 128}))
    assert max_length_of(tmp_path) == 128


def test_bad_inputs_are_one_line(model):
    with pytest.raises(GlassformerError, match="at least one text"):
        embed(model, [])
    no_tokenizer = Model(model.cfg, model.params)
    with pytest.raises(GlassformerError, match="WordPiece tokenizer"):
        embed(no_tokenizer, ["a cat"])
