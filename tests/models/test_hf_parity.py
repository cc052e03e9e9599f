"""Hugging Face parity through files: random-init transformers models written with
save_pretrained (safetensors) and read with glassformer.load_pretrained give the same logits /
hidden states and the same greedy continuations; a loaded LLaMA fine-tunes with gradients equal
to torch autograd's; glassformer-trained GPT-2 and LLaMA models exported with save_pretrained
load in transformers with the same logits."""
import numpy as np
import pytest

from glassformer.io import hf_names
from glassformer.io.pretrained import load_pretrained, save_pretrained
from glassformer.models import gpt2, llama
from glassformer.models.model import Model
from glassformer.train.optim import adamw_init, adamw_step
from glassformer.train.step import loss_and_grads

from tests.models.hf_check import assert_logits_and_greedy_match

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

HF_ATOL = 1e-4        # the bar for logits / hidden states (measured: ~1e-6)
EXPORT_ATOL = 1e-5    # export round trip: the same float32 weights on both sides
TORCH_RTOL = 1e-5     # float32 gradients, relative to max(|ref|, GRAD_FLOOR)
GRAD_FLOOR = 1e-6
NEW_TOKENS = 32
V = 97                # vocabulary of the test models
INIT_STD = 0.2        # wider than HF's 0.02 so logits are far apart and greedy has no near-ties


def spread_out(model):
    """Give biases and norm gains random values (HF inits them to 0 and 1)."""
    torch.manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            if p.ndim == 1:
                p.add_(torch.randn_like(p) * 0.1)
    return model.eval()


def hf_model(kind: str):
    torch.manual_seed(0)
    common = dict(vocab_size=V, initializer_range=INIT_STD, bos_token_id=None,
                  eos_token_id=None)
    decoder = dict(hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                   **common)
    if kind == "gpt2":
        cfg = transformers.GPT2Config(n_positions=64, n_embd=32, n_layer=2, n_head=4, **common)
        return spread_out(transformers.GPT2LMHeadModel(cfg))
    if kind == "llama":
        return spread_out(transformers.LlamaForCausalLM(transformers.LlamaConfig(**decoder)))
    if kind == "qwen2":
        return spread_out(transformers.Qwen2ForCausalLM(transformers.Qwen2Config(**decoder)))
    cfg = transformers.BertConfig(hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                                  num_attention_heads=4, max_position_embeddings=64, **common)
    return spread_out(transformers.BertModel(cfg))


def prompts():
    rng = np.random.default_rng(0)
    ids = rng.integers(0, V, (2, 6))
    mask = np.ones((2, 6), np.int64)
    mask[1, :2] = 0   # left padding
    return ids, mask


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["gpt2", "llama", "qwen2"])
def test_causal_lm_logits_and_greedy_continuation_match(kind, tmp_path):
    reference = hf_model(kind)
    reference.save_pretrained(tmp_path)
    model = load_pretrained(tmp_path)
    ids, mask = prompts()
    assert_logits_and_greedy_match(model, reference, ids, mask, atol=HF_ATOL,
                                   new_tokens=NEW_TOKENS)


def test_bert_hidden_states_match_with_padding(tmp_path):
    reference = hf_model("bert")
    reference.save_pretrained(tmp_path)
    model = load_pretrained(tmp_path)
    assert model.arch == "bert" and not model.cfg.mlm_head   # pooler skipped, no MLM head
    ids, mask = prompts()
    mask = mask[:, ::-1].copy()   # BERT pads on the right
    hidden = model(ids, attention_mask=mask)
    with torch.no_grad():
        ref = reference(torch.from_numpy(ids), attention_mask=torch.from_numpy(mask))
    assert np.abs(hidden - ref.last_hidden_state.numpy())[mask.astype(bool)].max() <= HF_ATOL


def test_llama_from_hf_fine_tunes_with_gradients_equal_to_torch(tmp_path):
    reference = hf_model("llama").train()
    reference.save_pretrained(tmp_path)
    model = load_pretrained(tmp_path)
    rng = np.random.default_rng(1)
    x, y = rng.integers(0, V, (2, 16)), rng.integers(0, V, (2, 16))
    opt = adamw_init(model.params)
    losses = []
    for _ in range(3):
        loss, grads = loss_and_grads(model.family, model.params, model.cfg, x, y, rng=None)
        torch_loss, theirs = torch_loss_and_grads(reference, model.cfg, x, y)
        assert loss == pytest.approx(torch_loss, rel=TORCH_RTOL)
        assert set(grads) == set(theirs)
        for key, grad in grads.items():
            err = np.abs(grad - theirs[key]).max() / max(np.abs(theirs[key]).max(), GRAD_FLOOR)
            assert err < TORCH_RTOL, (key, err)
        losses.append(loss)
        adamw_step(model.params, grads, opt, lr=1e-2)
        load_into(reference, model)   # torch continues from glassformer's updated weights
    assert losses[-1] < losses[0]


def torch_loss_and_grads(reference, cfg, x, y):
    reference.zero_grad()
    logits = reference(torch.from_numpy(x)).logits
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V), torch.from_numpy(y).reshape(-1))
    loss.backward()
    grads = {k: p.grad.numpy() for k, p in reference.named_parameters()}
    table = hf_names.hf_keys_by_table_name("llama", grads)
    return loss.item(), hf_names.to_glassformer("llama", cfg,
                                                {name: grads[k] for name, k in table.items()})


def load_into(reference, model):
    tensors = hf_names.to_hf(model.arch, model.cfg, model.params)
    reference.load_state_dict({k: torch.from_numpy(v) for k, v in tensors.items()}, strict=True)


EXPORTS = {
    "gpt2-nobias-tied": (gpt2, dict(bias=False, tie_embeddings=True)),
    "gpt2-bias-untied-erf": (gpt2, dict(bias=True, tie_embeddings=False, activation="gelu")),
    "llama-gqa-untied": (llama, dict(n_kv_head=2)),
    "llama-tied-qkv-bias": (llama, dict(n_kv_head=1, tie_embeddings=True, qkv_bias=True)),
}


@pytest.mark.parametrize("name", sorted(EXPORTS))
def test_trained_model_exports_to_transformers(name, tmp_path):
    family, overrides = EXPORTS[name]
    config_class = gpt2.GPT2Config if family is gpt2 else llama.LlamaConfig
    cfg = config_class(vocab_size=V, max_seq_len=32, n_layer=2, n_head=4, d_model=32,
                       **overrides)
    model = Model(cfg, family.init_params(cfg, np.random.default_rng(0)))
    rng = np.random.default_rng(2)
    opt = adamw_init(model.params)
    for _ in range(5):   # a few real steps, so biases and norms are no longer at their init
        x, y = rng.integers(0, V, (4, 16)), rng.integers(0, V, (4, 16))
        _, grads = loss_and_grads(family, model.params, cfg, x, y, rng=None)
        adamw_step(model.params, grads, opt, lr=1e-2)
    save_pretrained(model, tmp_path)
    exported = transformers.AutoModelForCausalLM.from_pretrained(tmp_path).eval()
    ids = rng.integers(0, V, (2, 20))
    with torch.no_grad():
        theirs = exported(torch.from_numpy(ids)).logits.numpy()
    assert np.abs(model(ids) - theirs).max() <= EXPORT_ATOL
    again = load_pretrained(tmp_path)
    assert np.abs(again(ids) - model(ids)).max() <= EXPORT_ATOL


def test_sharded_checkpoint_loads(tmp_path):
    reference = hf_model("llama")
    reference.save_pretrained(tmp_path, max_shard_size="20KB")
    assert (tmp_path / "model.safetensors.index.json").is_file()
    model = load_pretrained(tmp_path)
    ids, _ = prompts()
    with torch.no_grad():
        ref = reference(torch.from_numpy(ids)).logits.numpy()
    assert np.abs(model(ids) - ref).max() <= HF_ATOL
