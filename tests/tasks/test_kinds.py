"""Every task asks the model's family what kind it is (Family.kind: causal, encoder,
encoder-decoder) and refuses the wrong kind in one line, with the words pinned here."""
import numpy as np
import pytest

from glassformer.errors import GlassformerError
from glassformer.generate.generate import generate
from glassformer.models import bert, gpt2, seq2seq
from glassformer.models.model import Model
from glassformer.tasks.embed import embed
from glassformer.tasks.fill_mask import fill_mask
from glassformer.tasks.perplexity import evaluate_ids
from glassformer.tokenizers.char import CharTokenizer
from glassformer.tokenizers.char_wordpiece import BERT_SPECIALS


def causal() -> Model:
    cfg = gpt2.GPT2Config(vocab_size=16, max_seq_len=8, n_layer=1, n_head=2, d_model=8)
    return Model(cfg, gpt2.init_params(cfg, np.random.default_rng(0)))


def encoder(mlm_head: bool) -> Model:
    tokenizer = CharTokenizer.from_text("床前明月光", BERT_SPECIALS)
    cfg = bert.BertConfig(vocab_size=tokenizer.vocab_size, max_seq_len=16, n_layer=1, n_head=2,
                          d_model=8, d_ff=16, mlm_head=mlm_head)
    return Model(cfg, bert.init_params(cfg, np.random.default_rng(0)), tokenizer)


def encoder_decoder() -> Model:
    cfg = seq2seq.Seq2SeqConfig(vocab_size=8, max_seq_len=8, n_layer=1, n_head=2, d_model=16)
    return Model(cfg, seq2seq.init_params(cfg, np.random.default_rng(0)))


def one_line(call, *args, **kwargs) -> str:
    with pytest.raises(GlassformerError) as caught:
        call(*args, **kwargs)
    message = str(caught.value)
    assert "\n" not in message
    return message


def test_fill_mask_needs_an_encoder_with_its_masked_lm_head():
    assert fill_mask(encoder(mlm_head=True), "床前[MASK]月光", top_k=2)[0][0][1] > 0.0
    assert one_line(fill_mask, causal(), "a [MASK]").endswith("this model is gpt2")
    assert one_line(fill_mask, encoder(mlm_head=False), "床[MASK]").endswith(
        "this model is a BERT without its masked-LM head")


def test_embed_needs_an_encoder():
    assert one_line(embed, causal(), ["a"]) == ("embeddings need an encoder (BERT) model; this "
                                                "one is gpt2")


def test_perplexity_needs_a_causal_lm():
    ids = np.arange(16) % 8
    assert evaluate_ids(causal(), ids, block_size=4).tokens == 12    # three windows of four
    assert "which a BERT encoder does not predict" in one_line(evaluate_ids, encoder(True), ids)
    assert "an encoder-decoder is judged on pairs" in one_line(evaluate_ids, encoder_decoder(),
                                                               ids)


def test_generate_refuses_an_encoder_decoder():
    steps = generate(encoder_decoder(), np.array([[3, 4]]), max_new_tokens=2)
    assert one_line(next, steps).startswith("this is an encoder-decoder: it writes an output")
