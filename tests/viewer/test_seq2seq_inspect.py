"""glassformer.inspect on an encoder-decoder: encoder, decoder and cross-attentions equal
transformers' encoder_attentions / decoder_attentions / cross_attentions (eager attention) for
random-init MarianMT and BART with source padding, and so do the hidden states (post-norm
models); a target text becomes <start> + target in and target + </s> out; without a target the
model's greedy translation is shown."""
import dataclasses

import numpy as np
import pytest

import glassformer
from glassformer.errors import GlassformerError
from glassformer.models.model import Model
from glassformer.models.seq2seq import Seq2SeqConfig, init_params
from glassformer.tokenizers.pairs import BOS_ID, EOS_ID, PairTokenizer

ATTN_ATOL = 1e-5      # float32 softmax weights, a few ops deep (as tests/viewer/test_inspect.py)
HIDDEN_ATOL = 1e-4    # float32 sums over two layers (as tests/viewer/test_inspect.py)
V = 41


def hf_model(kind: str):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    torch.manual_seed(0)
    sizes = dict(vocab_size=V, d_model=16, encoder_layers=2, decoder_layers=2,
                 encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=24,
                 decoder_ffn_dim=24, max_position_embeddings=32, init_std=0.3,
                 attn_implementation="eager")
    if kind == "marian":
        cfg = transformers.MarianConfig(pad_token_id=V - 1, decoder_start_token_id=V - 1,
                                        eos_token_id=0, **sizes)
        return transformers.MarianMTModel(cfg).eval()
    return transformers.BartForConditionalGeneration(transformers.BartConfig(**sizes)).eval()


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["marian", "bart"])
def test_three_kinds_of_attention_equal_transformers(kind, tmp_path):
    torch = pytest.importorskip("torch")
    reference = hf_model(kind)
    reference.save_pretrained(tmp_path)
    model = glassformer.load_pretrained(tmp_path)
    rng = np.random.default_rng(0)
    src = rng.integers(3, V - 1, (2, 7))
    mask = np.ones(src.shape, np.int64)
    mask[1, -2:] = 0                                   # right padding in the source
    dec_in = rng.integers(3, V - 1, (2, 5))
    dec_in[:, 0] = model.cfg.decoder_start_id
    seen = glassformer.inspect(model, src, attention_mask=mask, decoder_input_ids=dec_in)
    with torch.no_grad():
        ref = reference(torch.from_numpy(src), attention_mask=torch.from_numpy(mask),
                        decoder_input_ids=torch.from_numpy(dec_in), output_attentions=True,
                        output_hidden_states=True)
    pairs = [(seen.encoder_attentions, ref.encoder_attentions),
             (seen.decoder_attentions, ref.decoder_attentions),
             (seen.cross_attentions, ref.cross_attentions)]
    for ours_list, theirs_list in pairs:
        assert len(ours_list) == len(theirs_list) == 2
        for ours, theirs in zip(ours_list, theirs_list):
            assert ours.dtype == np.float32 and ours.shape == tuple(theirs.shape)
            assert np.abs(ours - theirs.numpy()).max() <= ATTN_ATOL
    for ours_list, theirs_list in [(seen.encoder_hidden_states, ref.encoder_hidden_states),
                                   (seen.decoder_hidden_states, ref.decoder_hidden_states)]:
        assert len(ours_list) == len(theirs_list) == 3
        for ours, theirs in zip(ours_list, theirs_list):
            assert np.abs(ours - theirs.numpy()).max() <= HIDDEN_ATOL
    assert seen.cross_attentions[0].shape == (2, 4, 5, 7)                # (B, H, T, S)
    assert np.abs(seen.cross_attentions[1][1, :, :, -2:]).max() == 0.0   # padding is never read
    assert np.array_equal(seen.output_ids[:, :-1], dec_in[:, 1:])
    assert (seen.output_ids[:, -1] == model.cfg.eos_id).all()


def tiny_pair_model():
    tokenizer = PairTokenizer.from_pairs(["cat", "act"], ["K AE T", "AE K T"], target_split="space")
    cfg = Seq2SeqConfig(vocab_size=tokenizer.vocab_size, max_seq_len=12, n_layer=1, n_head=2,
                        d_model=8, pad_id=0, eos_id=EOS_ID, decoder_start_id=BOS_ID)
    return Model(cfg, init_params(cfg, np.random.default_rng(0)), tokenizer)


def test_target_text_and_greedy_translation():
    model = tiny_pair_model()
    seen = glassformer.inspect(model, "cat", target="K AE T")
    assert [t.text for t in seen.source_tokens] == ["c", "a", "t"]
    assert [t.text for t in seen.decoder_tokens] == ["<s>", "K", "AE", "T"]
    assert [t.text for t in seen.output_tokens] == ["K", "AE", "T", "</s>"]
    assert seen.cross_attentions[0].shape == (1, 2, 4, 3)
    assert np.allclose(seen.cross_attentions[0].sum(-1), 1.0, atol=1e-6)
    assert np.triu(seen.decoder_attentions[0][0, 0], 1).max() == 0.0      # causal
    own = glassformer.inspect(model, "cat")
    translated = glassformer.translate(model, [model.tokenizer.encode("cat")])[0]
    assert own.decoder_input_ids[0].tolist() == [BOS_ID] + translated
    assert own.output_ids[0].tolist() == translated + [EOS_ID]


def test_hidden_states_of_a_post_norm_model_only():
    model = tiny_pair_model()
    seen = glassformer.inspect(model, "cat", target="K AE T")
    assert [h.shape for h in seen.encoder_hidden_states] == [(1, 3, 8)] * 2
    assert [h.shape for h in seen.decoder_hidden_states] == [(1, 4, 8)] * 2
    cfg = dataclasses.replace(model.cfg, norm_position="pre")
    pre = Model(cfg, init_params(cfg, np.random.default_rng(0)), model.tokenizer)
    with pytest.raises(GlassformerError, match="pre-norm"):
        glassformer.inspect(pre, "cat", target="K").encoder_hidden_states


def test_bad_requests_are_one_line():
    model = tiny_pair_model()
    with pytest.raises(GlassformerError, match="not both"):
        glassformer.inspect(model, "cat", target="K", decoder_input_ids=[[BOS_ID]])
    with pytest.raises(GlassformerError, match="decoder_input_ids must be"):
        glassformer.inspect(model, [[3, 4], [4, 3]], decoder_input_ids=[[BOS_ID]])
    with pytest.raises(GlassformerError, match="empty"):
        glassformer.inspect(model, "", target="K")
    with pytest.raises(GlassformerError, match="past this model's"):
        glassformer.inspect(model, "cat", target=" ".join(["K"] * 20))
    from glassformer.models.gpt2 import GPT2Config
    from glassformer.models.gpt2 import init_params as gpt2_init
    cfg = GPT2Config(vocab_size=8, n_layer=1, n_head=2, d_model=8, max_seq_len=8)
    with pytest.raises(GlassformerError, match="encoder-decoders"):
        glassformer.inspect(Model(cfg, gpt2_init(cfg, np.random.default_rng(0))), [1, 2],
                            target=[3])
