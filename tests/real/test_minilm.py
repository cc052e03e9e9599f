"""all-MiniLM-L6-v2: `glassformer embed --json` vs sentence-transformers on the same folder, on
English and Chinese sentences, with glassformer's own WordPiece tokenizer."""
import json

import numpy as np
import pytest

from glassformer.cli import main

pytestmark = pytest.mark.slow

# float32 on both sides through 6 layers; measured differences are ~1e-7.
EMBEDDING_TOLERANCE = 1e-5
SENTENCES = [
    "The cat sits on the mat.",
    "A kitten is resting on a rug.",
    "Stock markets fell sharply today.",
    "Héllo, naïve café! Don't over-think it...",
    "我喜欢在公园里散步。",
    "今天的股市大幅下跌。",
    "机器学习 is fun 🙂",
    "long " * 300,            # past 256 tokens: cut as sentence-transformers cuts it
]


def test_embed_json_matches_sentence_transformers(minilm_path, capsys):
    st = pytest.importorskip("sentence_transformers",
                             reason="the reference is sentence-transformers")
    assert main(["embed", "--model", "minilm", "--json", *SENTENCES]) == 0
    result = json.loads(capsys.readouterr().out)
    ours = np.array(result["embeddings"], dtype=np.float32)
    reference = st.SentenceTransformer(str(minilm_path), device="cpu").encode(
        SENTENCES, convert_to_numpy=True)
    assert result["max_length"] == 256
    assert ours.shape == reference.shape == (len(SENTENCES), 384)
    assert np.abs(ours - reference).max() <= EMBEDDING_TOLERANCE
    similarity = np.array(result["similarity"])
    assert np.allclose(similarity, reference @ reference.T, atol=EMBEDDING_TOLERANCE)
    # Sanity of meaning (MiniLM is trained on English): cat ~ kitten more than cat ~ stocks.
    assert similarity[0, 1] > similarity[0, 2]


def test_minilm_uses_our_wordpiece(minilm_path):
    from glassformer.io.named_models import load_model
    from glassformer.tokenizers.wordpiece import WordPieceTokenizer

    model = load_model("minilm")
    assert isinstance(model.tokenizer, WordPieceTokenizer)
    assert model.arch == "bert" and model.cfg.d_model == 384 and model.cfg.n_layer == 6


def test_embed_text_output(capsys, minilm_path):
    assert main(["embed", "--model", "minilm", "--dims", "4", "a cat", "a dog"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("embeddings: 2 x 384 (first 4 dims)")
    assert "cosine similarity:" in out and "1.0000" in out
