"""Beam search against transformers' on a random-init MarianMT loaded with load_pretrained: with
no length penalty (GNMT alpha = 0, transformers' length_penalty = 0: both rank by the plain sum
of log-probabilities) the best hypothesis is the same, for several beam widths."""
import numpy as np
import pytest

from glassformer.io.pretrained import load_pretrained
from glassformer.tasks.translate import translate

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
pytestmark = pytest.mark.slow   # HF parity (STYLE.md section 10)

V, EOS, PAD = 23, 0, 22
NEW_TOKENS = 8
WEIGHT_SCALE = 4.0   # HF inits with std 0.02; spread the logits so no two beams tie


def marian(tmp_path):
    torch.manual_seed(1)
    cfg = transformers.MarianConfig(vocab_size=V, d_model=16, encoder_layers=2, decoder_layers=2,
                                    encoder_attention_heads=2, decoder_attention_heads=2,
                                    encoder_ffn_dim=32, decoder_ffn_dim=32,
                                    max_position_embeddings=32, pad_token_id=PAD,
                                    decoder_start_token_id=PAD, eos_token_id=EOS)
    model = transformers.MarianMTModel(cfg)
    with torch.no_grad():
        for key, p in model.named_parameters():
            if p.ndim == 2 and "embed_positions" not in key:
                p.mul_(WEIGHT_SCALE)
    model.eval().save_pretrained(tmp_path)
    return model


@pytest.mark.parametrize("beam", [2, 4])
def test_beam_search_equals_transformers_with_no_length_penalty(beam, tmp_path):
    hf = marian(tmp_path)
    ours_model = load_pretrained(tmp_path)
    rng = np.random.default_rng(beam)
    sources = [list(rng.integers(1, PAD, n)) + [EOS] for n in (3, 6, 9)]
    ours = translate(ours_model, sources, beam=beam, max_new_tokens=NEW_TOKENS, alpha=0.0)
    for source, ids in zip(sources, ours):
        with torch.no_grad():
            theirs = hf.generate(torch.tensor([source]), num_beams=beam, do_sample=False,
                                 length_penalty=0.0, early_stopping=False,
                                 max_new_tokens=NEW_TOKENS, forced_eos_token_id=None,
                                 bad_words_ids=None)[0].tolist()
        theirs = theirs[1:]                                  # the decoder start token
        theirs = theirs[:theirs.index(EOS)] if EOS in theirs else theirs
        theirs = [t for t in theirs if t != PAD]             # HF pads a shorter best beam
        assert ids == theirs
