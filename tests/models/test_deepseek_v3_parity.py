"""DeepSeek-V3 against transformers' DeepseekV3ForCausalLM, through files: random configs written
with save_pretrained load with the same logits (left padding) and the same greedy continuation;
glassformer's save_pretrained writes a folder transformers loads with the same logits; bad
folders get one line each."""
import json

import numpy as np
import pytest

from glassformer.errors import CheckpointError
from glassformer.generate.generate import generate
from glassformer.io.pretrained import load_pretrained, save_pretrained
from glassformer.models.deepseek_v3 import FAMILY, DeepseekV3Config
from glassformer.models.model import Model
from safetensors.numpy import load_file, save_file

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

HF_ATOL = 1e-4        # the bar for logits
EXPORT_ATOL = 1e-5    # export round trip: the same float32 weights on both sides
NEW_TOKENS = 24
V = 97
INIT_STD = 0.2        # wider than HF's 0.02 so logits are far apart and greedy has no near-ties

# odd widths throughout; "yarn" also interleaves RoPE pairs and scales the softmax (mscale)
HF_CONFIGS = {
    "q-lora-yarn": dict(q_lora_rank=10, rope_interleave=True,
                        rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0,
                                         "factor": 4.0, "original_max_position_embeddings": 16,
                                         "beta_fast": 32.0, "beta_slow": 1.0, "mscale": 0.7,
                                         "mscale_all_dim": 1.0}),
    "plain-q-rotate-half": dict(q_lora_rank=None, rope_interleave=False,
                                rope_parameters={"rope_type": "default", "rope_theta": 500.0},
                                tie_word_embeddings=True),
}


def hf_model(name: str):
    torch.manual_seed(0)
    cfg = transformers.DeepseekV3Config(
        vocab_size=V, hidden_size=24, intermediate_size=40, num_hidden_layers=2,
        num_attention_heads=3, num_key_value_heads=3, kv_lora_rank=12, qk_nope_head_dim=6,
        qk_rope_head_dim=4, v_head_dim=5, first_k_dense_replace=2, max_position_embeddings=64,
        rms_norm_eps=1e-5, initializer_range=INIT_STD, bos_token_id=None, eos_token_id=None,
        **HF_CONFIGS[name])
    model = transformers.DeepseekV3ForCausalLM(cfg)
    torch.manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            if p.ndim == 1:   # norm gains away from 1
                p.add_(torch.randn_like(p) * 0.1)
    return model.eval()


def prompts():
    rng = np.random.default_rng(0)
    ids = rng.integers(0, V, (2, 7))
    mask = np.ones((2, 7), np.int64)
    mask[1, :2] = 0   # left padding
    return ids, mask


@pytest.mark.slow
@pytest.mark.parametrize("name", HF_CONFIGS)
def test_logits_and_greedy_continuation_match(name, tmp_path):
    reference = hf_model(name)
    reference.save_pretrained(tmp_path)
    model = load_pretrained(tmp_path)
    assert model.arch == "deepseek_v3"
    ids, mask = prompts()
    logits = model(ids, attention_mask=mask)
    with torch.no_grad():
        ref = reference(torch.from_numpy(ids), attention_mask=torch.from_numpy(mask)).logits
    real = mask.astype(bool)  # padded positions' outputs are never read
    assert np.abs(logits - ref.numpy())[real].max() <= HF_ATOL
    ours = np.stack(list(generate(model, ids, attention_mask=mask, max_new_tokens=NEW_TOKENS,
                                  temperature=0.0)), axis=1)
    greedy = transformers.GenerationConfig(max_new_tokens=NEW_TOKENS, do_sample=False,
                                           pad_token_id=0, eos_token_id=None)
    theirs = reference.generate(torch.from_numpy(ids), attention_mask=torch.from_numpy(mask),
                                generation_config=greedy)[:, ids.shape[1]:]
    np.testing.assert_array_equal(ours, theirs.numpy())


@pytest.mark.slow
@pytest.mark.parametrize("yarn", [False, True], ids=["default-rope", "yarn"])
def test_save_pretrained_loads_in_transformers_with_the_same_logits(yarn, tmp_path):
    rope = dict(rope_type="yarn", rope_factor=4.0, rope_original_max_seq_len=16,
                rope_attention_factor=0.9, rope_mscale_all_dim=1.0) if yarn else {}
    cfg = DeepseekV3Config(vocab_size=V, max_seq_len=64, n_layer=2, n_head=3, d_model=24,
                           d_ff=40, q_lora_rank=10, kv_lora_rank=12, qk_nope_head_dim=6,
                           qk_rope_head_dim=4, v_head_dim=5, **rope)
    rng = np.random.default_rng(0)
    params = {name: (value + rng.standard_normal(value.shape).astype(np.float32) * 0.1)
              for name, value in FAMILY.init_params(cfg, rng).items()}
    model = Model(cfg, params)
    save_pretrained(model, tmp_path)
    reference = transformers.DeepseekV3ForCausalLM.from_pretrained(tmp_path).eval()
    ids, _ = prompts()
    with torch.no_grad():
        ref = reference(torch.from_numpy(ids)).logits.numpy()
    assert np.abs(model(ids) - ref).max() <= EXPORT_ATOL
    again = load_pretrained(tmp_path)
    assert again.cfg == cfg


def _saved(tmp_path):
    hf_model("q-lora-yarn").save_pretrained(tmp_path)
    return json.loads((tmp_path / "config.json").read_text())


def test_bad_folders_get_one_line(tmp_path):
    config = _saved(tmp_path)
    for key, value, message in (
            ("scoring_func", "softmax", "scoring_func='softmax'.*supported: 'sigmoid'"),
            ("first_k_dense_replace", 1, "sparse MoE layers are not implemented"),
            ("num_key_value_heads", 1, "one key and value per head"),
            ("use_fancy_attention", True, "key 'use_fancy_attention' is unknown")):
        (tmp_path / "config.json").write_text(json.dumps({**config, key: value}))
        with pytest.raises(CheckpointError, match=message) as err:
            load_pretrained(tmp_path)
        assert "\n" not in str(err.value)
    (tmp_path / "config.json").write_text(json.dumps(config))
    tensors = load_file(tmp_path / "model.safetensors")
    del tensors["model.layers.1.self_attn.kv_b_proj.weight"]
    save_file(tensors, tmp_path / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(CheckpointError, match="missing tensor 'layers.1.self_attn.kv_b_proj"):
        load_pretrained(tmp_path)
