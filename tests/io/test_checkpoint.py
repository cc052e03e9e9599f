"""Checkpoint folders: bit-exact round trip, verification errors, the train log, and kill -9."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from glassformer.errors import CheckpointError
from glassformer.io.checkpoint import (_sha256, append_train_log, load_checkpoint,
                                       read_train_log, resolve_checkpoint, rng_from_json,
                                       rng_to_json, save_checkpoint, trim_train_log)
from glassformer.io.safetensors import load_safetensors, save_safetensors

REPO_ROOT = Path(__file__).resolve().parents[2]
KILL_TRIALS = 8          # fresh writer processes SIGKILLed mid-save; about 0.5 s each
KILL_WINDOW_S = 0.08     # kill at a uniform moment this long after the first save completes


def _params(rng):
    return {"tok_emb": rng.standard_normal((11, 8)).astype(np.float32),
            "blocks.0.attn.wq": rng.standard_normal((8, 8)).astype(np.float32),
            "blocks.0.norm1.w": rng.standard_normal(8).astype(np.float32)}


def _optimizer(params, rng, t=7):
    m = {k: rng.standard_normal(p.shape).astype(np.float32) for k, p in params.items()}
    v = {k: rng.random(p.shape).astype(np.float32) for k, p in params.items()}
    return {"m": m, "v": v, "t": t}


def _save(run_dir, rng, **overrides):
    params = _params(rng)
    kwargs = dict(config={"n_layer": 1, "d_model": 8, "dropout": 0.0}, params=params,
                  optimizer=_optimizer(params, rng),
                  state={"iter": 7, "best_val_loss": 2.5, "rng": rng_to_json(rng)},
                  tokenizer_json={"type": "char", "chars": "\n 床前明月光abc"})
    kwargs.update(overrides)
    return save_checkpoint(run_dir, **kwargs), kwargs


def _assert_same_bits(a, b):
    assert a.dtype == b.dtype and a.shape == b.shape
    assert a.tobytes() == b.tobytes()


def _rewrite_manifest(folder):
    """Make manifest.json agree with the files again, as a buggy writer would have."""
    manifest = json.loads((folder / "manifest.json").read_text())
    for file, record in manifest["files"].items():
        record.update(bytes=(folder / file).stat().st_size, sha256=_sha256(folder / file))
    (folder / "manifest.json").write_text(json.dumps(manifest))


def test_round_trip_is_bit_exact(tmp_path):
    rng = np.random.default_rng(0)
    folder, saved = _save(tmp_path / "run", rng)
    saved["params"]["tok_emb"][0, :3] = [np.nan, -0.0, np.inf]  # unusual bits survive too
    folder, saved = _save(tmp_path / "run", rng, params=saved["params"],
                          optimizer=saved["optimizer"])
    ckpt = load_checkpoint(tmp_path / "run")
    assert ckpt.path == folder and resolve_checkpoint(tmp_path / "run") == folder
    assert ckpt.params.keys() == saved["params"].keys()
    for key, p in saved["params"].items():
        _assert_same_bits(ckpt.params[key], p)
        _assert_same_bits(ckpt.optimizer["m"][key], saved["optimizer"]["m"][key])
        _assert_same_bits(ckpt.optimizer["v"][key], saved["optimizer"]["v"][key])
    assert ckpt.optimizer["t"] == 7
    assert ckpt.config == saved["config"] and ckpt.tokenizer_json == saved["tokenizer_json"]
    assert ckpt.state == saved["state"]
    # the RNG continues exactly where it was saved
    expected = np.random.default_rng(0)
    expected.bit_generator.state = saved["state"]["rng"]
    assert rng_from_json(ckpt.state["rng"]).random(5).tolist() == expected.random(5).tolist()
    # loading the checkpoint folder itself works as well as the run folder
    assert load_checkpoint(folder).state == saved["state"]


def test_a_new_save_replaces_the_old_folder(tmp_path):
    rng = np.random.default_rng(1)
    first, _ = _save(tmp_path, rng)
    second, _ = _save(tmp_path, rng, state={"iter": 8})
    assert not first.exists() and second.is_dir()
    assert (tmp_path / "latest").read_text().strip() == second.name
    assert load_checkpoint(tmp_path).state == {"iter": 8}


def test_numpy_scalars_tokenizer_path_and_no_optimizer(tmp_path):
    rng = np.random.default_rng(2)
    tok_path = tmp_path / "tok.json"
    tok_path.write_text(json.dumps({"chars": "xyz"}))
    _save(tmp_path / "run", rng, optimizer=None, tokenizer_json=tok_path,
          state={"val_loss": np.float32(1.25), "iter": np.int64(3)})
    ckpt = load_checkpoint(tmp_path / "run")
    assert ckpt.optimizer is None and not (ckpt.path / "optimizer.safetensors").exists()
    assert ckpt.tokenizer_json == {"chars": "xyz"}
    assert ckpt.state == {"val_loss": 1.25, "iter": 3}
    with pytest.raises(CheckpointError, match="state.json.*ndarray is not JSON"):
        _save(tmp_path / "run2", rng, state={"x": np.zeros(2)})


def test_save_rejects_moments_that_do_not_match_params(tmp_path):
    rng = np.random.default_rng(3)
    params = _params(rng)
    optimizer = _optimizer(params, rng)
    del optimizer["v"]["tok_emb"]
    with pytest.raises(CheckpointError, match="missing key v.tok_emb"):
        _save(tmp_path, rng, params=params, optimizer=optimizer)


@pytest.mark.parametrize("damage, message", [
    (lambda f: (f / "tokenizer.json").unlink(), "tokenizer.json is missing"),
    (lambda f: (f / "optimizer.safetensors").unlink(), "optimizer.safetensors is missing"),
    (lambda f: _truncate(f / "model.safetensors", 100), "model.safetensors is truncated"),
    (lambda f: _truncate(f / "state.json", 5), "state.json is truncated or corrupt: not valid"),
    (lambda f: (f / "config.json").write_text('{"n_layer": 9, "d_model": 8, "dropout": 0.0}'),
     "config.json was modified after it was saved"),
    (lambda f: (f / "config.json").write_text("{not json"), "config.json is truncated or corrupt"),
    (lambda f: (f / "config.json").write_text('{"n_layer": 1}'), "config.json was modified"),
    (lambda f: _flip_last_byte(f / "optimizer.safetensors"),
     "optimizer.safetensors was modified after it was saved: its sha256"),
    (lambda f: (f / "manifest.json").write_text("[]"), "manifest.json should hold a JSON object"),
    (lambda f: (f / "manifest.json").write_text('{"format": 1, "files": {}}'),
     "manifest.json lists files"),
])
def test_damaged_checkpoints_name_the_file_and_problem(tmp_path, damage, message):
    folder, _ = _save(tmp_path, np.random.default_rng(4))
    damage(folder)
    with pytest.raises(CheckpointError, match=message):
        load_checkpoint(tmp_path)


def _truncate(path, n_bytes):
    path.write_bytes(path.read_bytes()[:n_bytes])


def _flip_last_byte(path):
    data = bytearray(path.read_bytes())
    data[-1] ^= 0x01
    path.write_bytes(bytes(data))


def test_consistent_files_with_wrong_keys_or_shapes(tmp_path):
    """Files that hash correctly but disagree with each other (a writer bug) are still caught."""
    folder, _ = _save(tmp_path, np.random.default_rng(5))
    moments = dict(load_safetensors(folder / "optimizer.safetensors"))
    moments_meta = {"t": "7"}
    cases = [
        ({k: a for k, a in moments.items() if k != "m.tok_emb"}, "missing key m.tok_emb"),
        ({**moments, "v.extra": np.zeros(2, np.float32)}, "extra key v.extra"),
        ({**moments, "m.blocks.0.attn.wq": np.zeros((8, 4), np.float32)},
         r"m.blocks.0.attn.wq of shape \(8, 4\), but parameter blocks.0.attn.wq has shape \(8, 8\)"),
        ({**moments, "junk": np.zeros(1, np.float32)}, "neither m.\\* nor v.\\*"),
    ]
    for tensors, message in cases:
        save_safetensors(folder / "optimizer.safetensors", tensors, metadata=moments_meta)
        _rewrite_manifest(folder)
        with pytest.raises(CheckpointError, match=message):
            load_checkpoint(tmp_path)


def test_missing_or_bad_pointers(tmp_path):
    with pytest.raises(CheckpointError, match="does not exist"):
        load_checkpoint(tmp_path / "nowhere")
    with pytest.raises(CheckpointError, match="holds no checkpoint"):
        load_checkpoint(tmp_path)
    folder, _ = _save(tmp_path, np.random.default_rng(6))
    (tmp_path / "latest").write_text("../../etc\n")
    with pytest.raises(CheckpointError, match="latest is corrupt"):
        load_checkpoint(tmp_path)
    (tmp_path / "latest").write_text("ckpt-00000001-abcdef\n")
    with pytest.raises(CheckpointError, match="is missing"):
        load_checkpoint(tmp_path)


def test_train_log_append_read_trim(tmp_path):
    for it in range(5):
        append_train_log(tmp_path, {"iter": it, "lr": 1e-3, "train_loss": np.float32(4.0 - it)})
    assert [r["iter"] for r in read_train_log(tmp_path)] == [0, 1, 2, 3, 4]
    assert read_train_log(tmp_path)[2]["train_loss"] == 2.0
    with open(tmp_path / "train_log.jsonl", "ab") as f:
        f.write(b'{"iter": 5, "lr"')  # a line torn by a crash
    assert len(read_train_log(tmp_path)) == 5
    append_train_log(tmp_path, {"iter": 5})
    assert [r["iter"] for r in read_train_log(tmp_path)] == [0, 1, 2, 3, 4, 5]
    # a resume from iteration 2 does its step again: the record at 2 comes back to be merged
    assert trim_train_log(tmp_path, max_iter=2)["train_loss"] == 2.0
    assert [r["iter"] for r in read_train_log(tmp_path)] == [0, 1]
    assert read_train_log(tmp_path / "empty") == []


def test_rng_state_json_round_trip():
    rng = np.random.default_rng(123)
    rng.random(3)
    state = json.loads(json.dumps(rng_to_json(rng)))
    assert rng_from_json(state).integers(0, 1000, 10).tolist() == rng.integers(0, 1000, 10).tolist()
    with pytest.raises(CheckpointError, match="cannot store a MT19937"):
        rng_to_json(np.random.Generator(np.random.MT19937(0)))
    with pytest.raises(CheckpointError, match="bit generator"):
        rng_from_json({"bit_generator": "Nope"})


WRITER = """
import sys
import numpy as np
from glassformer.io.checkpoint import save_checkpoint

run_dir, it = sys.argv[1], int(sys.argv[2])
first = it
while True:
    value = float(it)
    params = {"w": np.full((192, 192), value, np.float32), "b": np.full(192, value, np.float32)}
    m = {k: p + 0.5 for k, p in params.items()}
    v = {k: p + 0.25 for k, p in params.items()}
    save_checkpoint(run_dir, config={"iter": it}, params=params, optimizer={"m": m, "v": v, "t": it},
                    state={"iter": it}, tokenizer_json={"iter": it})
    if it == first:
        print("saved", flush=True)
    it += 1
"""


def test_kill_during_save_always_leaves_a_complete_checkpoint(tmp_path):
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    run_dir = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    rng = np.random.default_rng(0)
    for trial in range(KILL_TRIALS):
        first_iter = trial * 100_000
        child = subprocess.Popen([sys.executable, str(script), str(run_dir), str(first_iter)],
                                 stdout=subprocess.PIPE, env=env)
        try:
            assert child.stdout.readline() == b"saved\n"
            time.sleep(rng.uniform(0.0, KILL_WINDOW_S))
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait()
            child.stdout.close()
        ckpt = load_checkpoint(run_dir)  # whatever moment it died at, this loads in full
        it = ckpt.state["iter"]
        assert it >= first_iter  # the save that printed "saved" is never lost
        assert ckpt.config == {"iter": it} and ckpt.tokenizer_json == {"iter": it}
        assert ckpt.optimizer["t"] == it
        assert np.all(ckpt.params["w"] == it) and np.all(ckpt.params["b"] == it)
        assert np.all(ckpt.optimizer["m"]["w"] == it + 0.5)
        assert np.all(ckpt.optimizer["v"]["b"] == it + 0.25)
