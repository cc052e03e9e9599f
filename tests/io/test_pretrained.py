"""load_pretrained / save_pretrained without torch: rename tables invert exactly, folders written
by hand in Hugging Face layout and by `glassformer train` load, and every bad input is one clear
CheckpointError line (missing config or weights, unknown model_type, missing/unexpected key,
wrong shape, truncated file, pickle, broken shard index, untrue tied copy)."""
import json
import pickle
from pathlib import Path

import numpy as np
import pytest

from glassformer.errors import CheckpointError, GlassformerError
from glassformer.io import hf_names
from glassformer.io.checkpoint import save_checkpoint
from glassformer.io.hf_config import config_to_hf
from glassformer.io.pretrained import load_pretrained, save_pretrained
from glassformer.io.safetensors import load_safetensors, save_safetensors
from glassformer.models import bert, gpt2, llama
from glassformer.models.model import Model
from glassformer.models.registry import family
from glassformer.tokenizers.char import CharTokenizer

CONFIGS = {
    "gpt2": gpt2.GPT2Config(vocab_size=13, max_seq_len=8, n_layer=2, n_head=2, d_model=8),
    "gpt2-nobias-untied": gpt2.GPT2Config(vocab_size=13, max_seq_len=8, n_layer=1, n_head=2,
                                          d_model=8, bias=False, tie_embeddings=False),
    "llama": llama.LlamaConfig(vocab_size=13, max_seq_len=8, n_layer=2, n_head=4, n_kv_head=2,
                               d_model=8, d_ff=12),
    "qwen2-tied": llama.LlamaConfig(vocab_size=13, max_seq_len=8, n_layer=1, n_head=2,
                                    d_model=8, qkv_bias=True, tie_embeddings=True, head_dim=6),
    "bert-mlm": bert.BertConfig(vocab_size=13, max_seq_len=8, n_layer=2, n_head=2, d_model=8,
                                mlm_head=True),
}
FAMILIES = {"gpt2": gpt2, "llama": llama, "bert": bert}


def arch(cfg) -> str:
    return cfg.to_dict()["arch"]


def write_hf_folder(folder: Path, cfg, seed: int = 0) -> dict:
    """An HF-layout folder for `cfg` (config.json + model.safetensors); returns our params."""
    params = FAMILIES[arch(cfg)].init_params(cfg, np.random.default_rng(seed))
    if arch(cfg) != "bert":
        save_pretrained(Model(cfg, params), folder)
        return params
    folder.mkdir(parents=True, exist_ok=True)
    save_safetensors(folder / "model.safetensors", hf_names.to_hf(arch(cfg), cfg, params))
    (folder / "config.json").write_text(json.dumps(config_to_hf(cfg)))
    return params


def edit_weights(folder: Path, edit) -> None:
    tensors = {k: np.array(v) for k, v in load_safetensors(folder / "model.safetensors").items()}
    edit(tensors)
    save_safetensors(folder / "model.safetensors", tensors)


def load_error(path) -> str:
    with pytest.raises(CheckpointError) as err:
        load_pretrained(path)
    message = str(err.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_shapes_table_matches_init_and_renaming_inverts(name):
    cfg = CONFIGS[name]
    params = FAMILIES[arch(cfg)].init_params(cfg, np.random.default_rng(0))
    assert family(arch(cfg)).param_shapes(cfg) == {k: v.shape for k, v in params.items()}
    tensors = hf_names.to_hf(arch(cfg), cfg, params)
    table = hf_names.hf_keys_by_table_name(arch(cfg), tensors)
    assert {name: tensors[key].shape for name, key in table.items()} == hf_names.hf_shapes(
        arch(cfg), cfg)
    back = hf_names.to_glassformer(arch(cfg), cfg, {n: tensors[k] for n, k in table.items()})
    assert set(back) == set(params)
    for key, value in params.items():
        np.testing.assert_array_equal(back[key], value)
        assert back[key].flags.c_contiguous or back[key].flags.f_contiguous  # transposed: F order


def test_hf_layouts_transpose_linear_but_not_gpt2_conv1d():
    cfg = CONFIGS["gpt2"]
    params = gpt2.init_params(cfg, np.random.default_rng(0))
    tensors = hf_names.to_hf("gpt2", cfg, params)
    assert tensors["transformer.h.0.attn.c_attn.weight"].shape == (8, 24)   # (C, 3C), no .T
    np.testing.assert_array_equal(tensors["transformer.h.0.attn.c_attn.weight"][:, 8:16],
                                  params["blocks.0.attn.wk"])
    assert "lm_head.weight" not in tensors   # tied
    lcfg = CONFIGS["llama"]
    lparams = llama.init_params(lcfg, np.random.default_rng(0))
    ltensors = hf_names.to_hf("llama", lcfg, lparams)
    np.testing.assert_array_equal(ltensors["model.layers.0.self_attn.k_proj.weight"],
                                  lparams["blocks.0.attn.wk"].T)               # (K*D, C)
    np.testing.assert_array_equal(ltensors["lm_head.weight"], lparams["lm_head"].T)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_hand_written_hf_folder_loads(name, tmp_path):
    cfg = CONFIGS[name]
    params = write_hf_folder(tmp_path, cfg)
    model = load_pretrained(tmp_path)
    # the same model, though defaults (d_ff=None, ...) come back spelled out
    assert config_to_hf(model.cfg) == config_to_hf(cfg)
    for key, value in model.params.items():
        if key in params:
            np.testing.assert_array_equal(value, params[key])
        else:   # a bias-free GPT-2 exported with zero biases
            assert not np.any(value), key
    assert model.tokenizer is None


def test_prefixless_bare_model_and_stored_tied_copy_load(tmp_path):
    cfg = CONFIGS["qwen2-tied"]
    params = write_hf_folder(tmp_path, cfg)

    def bare_with_copy(tensors):
        for key in list(tensors):
            tensors[key[len("model."):]] = tensors.pop(key)
        tensors["lm_head.weight"] = tensors["embed_tokens.weight"].copy()

    edit_weights(tmp_path, bare_with_copy)
    model = load_pretrained(tmp_path)
    assert set(model.params) == set(params)


def test_ignored_buffers_and_bf16_weights(tmp_path):
    cfg = CONFIGS["bert-mlm"]
    params = write_hf_folder(tmp_path, cfg)

    def add_buffers(tensors):
        tensors["bert.embeddings.position_ids"] = np.arange(8, dtype=np.int64)[None]
        tensors["bert.pooler.dense.weight"] = np.zeros((8, 8), np.float32)
        tensors["bert.pooler.dense.bias"] = np.zeros(8, np.float32)
        tensors["bert.embeddings.word_embeddings.weight"] = tensors[
            "bert.embeddings.word_embeddings.weight"].astype(np.float16)

    edit_weights(tmp_path, add_buffers)
    model = load_pretrained(tmp_path)
    assert model.params["tok_emb"].dtype == np.float32
    np.testing.assert_array_equal(model.params["tok_emb"],
                                  params["tok_emb"].astype(np.float16).astype(np.float32))


def test_glassformer_run_folder_loads_with_its_tokenizer(tmp_path):
    cfg = CONFIGS["llama"]
    params = llama.init_params(cfg, np.random.default_rng(0))
    tokenizer = CharTokenizer.from_text("abcdefghijklm")
    tokenizer.save(tmp_path / "tok")
    save_checkpoint(tmp_path / "run", config=cfg.to_dict(), params=params, optimizer=None,
                    state={"iter": 0}, tokenizer_json=tmp_path / "tok" / "tokenizer.json")
    model = load_pretrained(tmp_path / "run")
    assert model.cfg == cfg and model.tokenizer.encode("cab") == tokenizer.encode("cab")
    np.testing.assert_array_equal(model.params["blocks.1.attn.wv"], params["blocks.1.attn.wv"])
    assert load_pretrained(tmp_path / "run", tokenizer=False).tokenizer is None


def test_save_pretrained_writes_hf_folder_and_tokenizer(tmp_path):
    cfg = CONFIGS["llama"]
    tokenizer = CharTokenizer.from_text("abcdefghijklm")
    model = Model(cfg, llama.init_params(cfg, np.random.default_rng(0)), tokenizer)
    save_pretrained(model, tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    assert config["model_type"] == "llama" and config["num_key_value_heads"] == 2
    again = load_pretrained(tmp_path)
    assert config_to_hf(again.cfg) == config_to_hf(cfg)
    assert again.tokenizer.decode(again.tokenizer.encode("mad")) == "mad"


# ---------------------------------------------------------------- bad input

def test_missing_folder_config_and_weights(tmp_path):
    assert "does not exist" in load_error(tmp_path / "nowhere")
    tmp_path.joinpath("empty").mkdir()
    assert "has no config.json" in load_error(tmp_path / "empty")
    write_hf_folder(tmp_path / "m", CONFIGS["gpt2"])
    (tmp_path / "m" / "model.safetensors").unlink()
    assert "has no weights: expected model.safetensors" in load_error(tmp_path / "m")
    (tmp_path / "m" / "config.json").write_text("{not json")
    assert "config.json is not valid JSON" in load_error(tmp_path / "m")


@pytest.mark.parametrize("change,message", [
    ({"model_type": "t5"}, "model_type 't5' is not one glassformer loads"),
    ({"n_embd": None}, "lacks the key 'n_embd'"),
    ({"quantization_config": {"bits": 4}}, "'quantization_config' is unknown"),
    ({"scale_attn_by_inverse_layer_idx": True}, "scale_attn_by_inverse_layer_idx=True"),
])
def test_bad_config_json(change, message, tmp_path):
    write_hf_folder(tmp_path, CONFIGS["gpt2"])
    config = json.loads((tmp_path / "config.json").read_text())
    for key, value in change.items():
        if value is None:
            del config[key]
        else:
            config[key] = value
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert message in load_error(tmp_path)


def test_missing_unexpected_and_misshapen_tensors(tmp_path):
    write_hf_folder(tmp_path, CONFIGS["llama"])
    original = (tmp_path / "model.safetensors").read_bytes()
    edit_weights(tmp_path, lambda t: t.pop("model.layers.1.mlp.up_proj.weight"))
    assert ("missing tensor 'layers.1.mlp.up_proj.weight' (expected shape (12, 8))"
            in load_error(tmp_path))
    (tmp_path / "model.safetensors").write_bytes(original)
    edit_weights(tmp_path, lambda t: t.update({"model.layers.0.extra.weight": np.ones(3)}))
    assert "unexpected tensor 'model.layers.0.extra.weight' of shape (3,)" in load_error(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(original)
    edit_weights(tmp_path, lambda t: t.update(
        {"model.layers.0.self_attn.k_proj.weight": np.ones((8, 8), np.float32)}))
    assert ("tensor 'model.layers.0.self_attn.k_proj.weight' has shape (8, 8), but config.json "
            "implies (4, 8)") in load_error(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(original)
    edit_weights(tmp_path, lambda t: t.update({"model.norm.weight": np.ones(8, np.int32)}))
    assert "dtype must be one of F64, F32, F16, BF16, got 'I32'" in load_error(tmp_path)


def test_tied_copy_that_differs_is_refused(tmp_path):
    write_hf_folder(tmp_path, CONFIGS["gpt2"])
    edit_weights(tmp_path, lambda t: t.update(
        {"lm_head.weight": t["transformer.wte.weight"] + 1.0}))
    assert "'lm_head.weight' should be a copy of 'wte.weight'" in load_error(tmp_path)


def test_truncated_safetensors(tmp_path):
    write_hf_folder(tmp_path, CONFIGS["gpt2"])
    data = (tmp_path / "model.safetensors").read_bytes()
    (tmp_path / "model.safetensors").write_bytes(data[:-100])
    assert "is truncated" in load_error(tmp_path)


def test_pickle_checkpoints_are_refused_with_a_conversion_hint(tmp_path):
    write_hf_folder(tmp_path, CONFIGS["gpt2"])
    (tmp_path / "model.safetensors").unlink()
    (tmp_path / "pytorch_model.bin").write_bytes(pickle.dumps({"wte.weight": [1.0]}))
    message = load_error(tmp_path)
    assert "pytorch_model.bin, a pickle file" in message
    assert "save_file" in message and "safe_serialization=True" in message
    assert "pickle file" in load_error(tmp_path / "pytorch_model.bin")
    # a pickle saved under the safetensors name is caught by the reader
    (tmp_path / "model.safetensors").write_bytes(pickle.dumps({"wte.weight": [1.0]}))
    assert "never unpickles" in load_error(tmp_path)


def test_broken_shard_index(tmp_path):
    cfg = CONFIGS["gpt2"]
    params = gpt2.init_params(cfg, np.random.default_rng(0))
    tensors = hf_names.to_hf("gpt2", cfg, params)
    names = sorted(tensors)
    shards = {"a.safetensors": names[:5], "b.safetensors": names[5:]}
    for file, keys in shards.items():
        save_safetensors(tmp_path / file, {k: tensors[k] for k in keys})
    weight_map = {k: file for file, keys in shards.items() for k in keys}
    (tmp_path / "config.json").write_text(json.dumps(config_to_hf(cfg)))
    index = tmp_path / "model.safetensors.index.json"
    index.write_text(json.dumps({"weight_map": weight_map}))
    np.testing.assert_array_equal(load_pretrained(tmp_path).params["tok_emb"], params["tok_emb"])
    index.write_text(json.dumps({"weight_map": {**weight_map, "ghost": "a.safetensors"}}))
    assert "lists tensor 'ghost' in a.safetensors" in load_error(tmp_path)
    index.write_text(json.dumps({"weight_map": {**weight_map, names[0]: "b.safetensors"}}))
    assert f"holds tensor {names[0]!r}, which" in load_error(tmp_path)
    (tmp_path / "a.safetensors").unlink()
    index.write_text(json.dumps({"weight_map": weight_map}))
    assert "no such file" in load_error(tmp_path)
    index.write_text(json.dumps({"weight_map": {names[0]: "../x.safetensors"}}))
    assert "expected a file name in the same folder" in load_error(tmp_path)


def test_glassformer_folder_with_wrong_shape(tmp_path):
    cfg = CONFIGS["gpt2"]
    params = gpt2.init_params(cfg, np.random.default_rng(0))
    params["pos_emb"] = params["pos_emb"][:4]
    save_safetensors(tmp_path / "model.safetensors", params)
    (tmp_path / "config.json").write_text(json.dumps(cfg.to_dict()))
    assert "tensor 'pos_emb' has shape (4, 8), but the config implies (8, 8)" in load_error(
        tmp_path)
