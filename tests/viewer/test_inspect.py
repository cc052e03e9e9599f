"""glassformer.inspect: attentions equal transformers' output_attentions (eager attention) for
random-init GPT-2, LLaMA and Qwen2 with grouped KV heads and BERT with padding; hidden states equal
output_hidden_states; the logit lens ends at the model's own prediction."""
import numpy as np
import pytest

import glassformer
from glassformer.errors import GlassformerError
from glassformer.io.pretrained import load_pretrained

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

ATTN_ATOL = 1e-5      # the bar: float32 softmax weights, a few ops deep
HIDDEN_ATOL = 1e-4    # as tests/models/test_hf_parity.py: float32 sums over two layers
V = 97


def hf_model(kind: str):
    torch.manual_seed(0)
    common = dict(vocab_size=V, initializer_range=0.2, bos_token_id=None, eos_token_id=None,
                  attn_implementation="eager")
    if kind == "gpt2":
        cfg = transformers.GPT2Config(n_positions=64, n_embd=32, n_layer=2, n_head=4, **common)
        return transformers.GPT2LMHeadModel(cfg).eval()
    decoder = dict(hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                   **common)
    if kind == "llama":
        return transformers.LlamaForCausalLM(transformers.LlamaConfig(**decoder)).eval()
    if kind == "qwen2":  # q/k/v biases
        return transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**decoder)).eval()
    cfg = transformers.BertConfig(hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                                  num_attention_heads=4, max_position_embeddings=64, **common)
    return transformers.BertModel(cfg).eval()


def ids_and_mask(kind: str):
    ids = np.random.default_rng(0).integers(0, V, (2, 7))
    mask = np.ones(ids.shape, np.int64)
    if kind == "bert":
        mask[1, -3:] = 0   # right padding: keys the other tokens must not read
    return ids, mask


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["gpt2", "llama", "qwen2", "bert"])
def test_attentions_and_hidden_states_equal_transformers(kind, tmp_path):
    reference = hf_model(kind)
    reference.save_pretrained(tmp_path)
    model = load_pretrained(tmp_path)
    ids, mask = ids_and_mask(kind)
    seen = glassformer.inspect(model, ids, attention_mask=mask)
    with torch.no_grad():
        ref = reference(torch.from_numpy(ids), attention_mask=torch.from_numpy(mask),
                        output_attentions=True, output_hidden_states=True)
    assert len(seen.attentions) == len(ref.attentions) == 2
    for ours, theirs in zip(seen.attentions, ref.attentions):
        assert ours.dtype == np.float32 and ours.shape == tuple(theirs.shape)
        assert np.abs(ours - theirs.numpy()).max() <= ATTN_ATOL
    for ours, theirs in zip(seen.hidden_states, ref.hidden_states):
        assert np.abs(ours - theirs.numpy()).max() <= HIDDEN_ATOL


@pytest.mark.slow
def test_logit_lens_ends_at_the_models_prediction(tmp_path):
    hf_model("llama").save_pretrained(tmp_path)
    model = load_pretrained(tmp_path)
    ids = np.random.default_rng(1).integers(0, V, (1, 9))
    seen = glassformer.inspect(model, ids)
    lens = seen.logit_lens(3)
    assert lens.ids.shape == (2, 1, 9, 3) and lens.rank.shape == (2, 1, 9)
    assert np.array_equal(lens.ids[-1, ..., 0], seen.out.argmax(-1))
    assert (lens.rank[-1] == 0).all()
    assert np.all(np.diff(lens.probs, axis=-1) <= 0)          # best first
    assert np.all(lens.entropy >= 0) and np.all(lens.entropy <= np.log2(V) + 1e-4)


def test_encoders_have_no_logit_lens_and_text_must_not_be_empty():
    from glassformer.models.bert import BertConfig, init_params
    from glassformer.models.model import Model
    cfg = BertConfig(vocab_size=20, n_layer=1, n_head=2, d_model=8, max_seq_len=16)
    model = Model(cfg, init_params(cfg, np.random.default_rng(0)))
    seen = glassformer.inspect(model, [1, 2, 3])
    assert seen.attentions[0].shape == (1, 2, 3, 3)
    assert np.allclose(seen.attentions[0].sum(-1), 1.0, atol=1e-6)
    with pytest.raises(GlassformerError, match="encoder"):
        seen.logit_lens(3)
    with pytest.raises(GlassformerError, match="empty"):
        glassformer.inspect(model, "")
