"""SAELens's folder format both ways: an SAE saved here loads in sae_lens with the same
encodings (<= 1e-5), and folders sae_lens saves (standard, TopK with its decoder-norm rescaling,
apply_b_dec_to_input off) load here with sae_lens's encodings; bad folders are one line."""
import json

import numpy as np
import pytest

from glassformer.errors import GlassformerError
from glassformer.interpret.sae.model import SAEConfig, decode, encode
from glassformer.interpret.sae.saelens_folder import load_sae, save_sae
from saelens_ref import sae_lens

C, F = 8, 20
TOL = 1e-5


def _params(seed):
    rng = np.random.default_rng(seed)
    return {"w_enc": rng.standard_normal((C, F)).astype(np.float32),
            "b_enc": (0.3 * rng.standard_normal(F)).astype(np.float32),
            "w_dec": rng.standard_normal((F, C)).astype(np.float32),
            "b_dec": (0.3 * rng.standard_normal(C)).astype(np.float32)}


def _x(seed=9):
    return np.random.default_rng(seed).standard_normal((32, C)).astype(np.float32)


def _their_encode(sae, x):
    import torch
    with torch.no_grad():
        acts = sae.encode(torch.from_numpy(x))
        return acts.numpy(), sae.decode(acts).numpy()


def _close(ours, theirs):
    assert np.max(np.abs(ours - theirs)) <= TOL * max(1.0, np.max(np.abs(theirs)))


@pytest.mark.parametrize("cfg", [SAEConfig(d_in=C, d_sae=F, arch="relu", l1=1.0),
                                 SAEConfig(d_in=C, d_sae=F, arch="topk", k=5)], ids=repr)
def test_saved_here_loads_in_saelens_with_the_same_encodings(tmp_path, cfg):
    ref = sae_lens()
    params = _params(0)
    save_sae(tmp_path / "sae", params, cfg, {"hook_name": "blocks.1.hook_resid_post"})
    theirs = ref.SAE.load_from_disk(tmp_path / "sae")
    assert theirs.cfg.metadata.hook_name == "blocks.1.hook_resid_post"
    acts, out = _their_encode(theirs, _x())
    _close(encode(params, _x(), cfg), acts)
    _close(decode(params, encode(params, _x(), cfg)), out)
    loaded, cfg_back, metadata = load_sae(tmp_path / "sae")
    assert cfg_back.arch == cfg.arch and cfg_back.k == cfg.top_k
    assert metadata["hook_name"] == "blocks.1.hook_resid_post"


def _saelens_saved(ref, tmp_path, sae, params):
    import torch
    with torch.no_grad():
        for ours, theirs in (("w_enc", "W_enc"), ("b_enc", "b_enc"), ("w_dec", "W_dec"),
                             ("b_dec", "b_dec")):
            getattr(sae, theirs).copy_(torch.from_numpy(params[ours]))
    sae.save_inference_model(tmp_path / "theirs")
    return ref.SAE.load_from_disk(tmp_path / "theirs")


@pytest.mark.parametrize("arch", ["standard", "topk"])
def test_saved_by_saelens_loads_here_with_its_encodings(tmp_path, arch):
    ref = sae_lens()
    if arch == "standard":
        sae = ref.StandardTrainingSAE(ref.StandardTrainingSAEConfig(d_in=C, d_sae=F))
    else:   # rescale_acts_by_decoder_norm (its default) on a decoder far from unit norm
        sae = ref.TopKTrainingSAE(ref.TopKTrainingSAEConfig(d_in=C, d_sae=F, k=5))
    reloaded = _saelens_saved(ref, tmp_path, sae, _params(1))
    params, cfg, _ = load_sae(tmp_path / "theirs")
    acts, out = _their_encode(reloaded, _x())
    _close(encode(params, _x(), cfg), acts)
    _close(decode(params, encode(params, _x(), cfg)), out)


def test_apply_b_dec_to_input_off_is_folded(tmp_path):
    ref = sae_lens()
    save_sae(tmp_path / "sae", _params(2), SAEConfig(d_in=C, d_sae=F, l1=1.0), {})
    cfg_path = tmp_path / "sae" / "cfg.json"
    raw = json.loads(cfg_path.read_text())
    cfg_path.write_text(json.dumps({**raw, "apply_b_dec_to_input": False}))
    theirs = ref.SAE.load_from_disk(tmp_path / "sae")
    params, cfg, _ = load_sae(tmp_path / "sae")
    acts, _ = _their_encode(theirs, _x())
    _close(encode(params, _x(), cfg), acts)


@pytest.mark.parametrize("change, message", [
    ({"architecture": "jumprelu"}, "architecture 'jumprelu' is not supported"),
    ({"normalize_activations": "layer_norm"}, "normalize_activations 'layer_norm'"),
    ({"reshape_activations": "hook_z"}, "hook_z"),
    ({"d_sae": F + 1}, "W_enc has shape"),
])
def test_bad_folders_are_one_line(tmp_path, change, message):
    save_sae(tmp_path / "sae", _params(3), SAEConfig(d_in=C, d_sae=F, l1=1.0), {})
    cfg_path = tmp_path / "sae" / "cfg.json"
    cfg_path.write_text(json.dumps({**json.loads(cfg_path.read_text()), **change}))
    with pytest.raises(GlassformerError, match=message):
        load_sae(tmp_path / "sae")


def test_a_folder_without_weights_is_one_line(tmp_path):
    (tmp_path / "cfg.json").write_text("{}")
    with pytest.raises(GlassformerError, match="has no sae_weights.safetensors"):
        load_sae(tmp_path)


def test_sae_eval_reads_a_folder_saelens_saved(tmp_path, capsys):
    """`glassformer sae eval` on SAELens's own folder, its hook given on the command line."""
    from glassformer.cli import main
    from sae_fixtures import D_MODEL, saved_llama
    ref = sae_lens()
    model_dir = saved_llama(tmp_path / "llama")
    sae = ref.TopKTrainingSAE(ref.TopKTrainingSAEConfig(d_in=D_MODEL, d_sae=32, k=4))
    sae.save_inference_model(tmp_path / "theirs")
    assert main(["sae", "eval", "--model", model_dir, "--sae", str(tmp_path / "theirs"),
                 "--hook", "blocks.1.hook_resid_post", "--data", "tinyshakespeare",
                 "--eval-tokens", "64", "--context", "32", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["arch"] == "topk" and report["l0"] <= 4.0
    assert main(["sae", "eval", "--model", model_dir, "--sae", str(tmp_path / "theirs"),
                 "--data", "tinyshakespeare", "--eval-tokens", "64"]) == 2
    assert "names no hook_name; pass --hook" in capsys.readouterr().err
