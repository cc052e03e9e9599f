"""Issue 32: a checkpoint that cannot be written (a full disk, a read-only folder) ends in one
line naming the run folder, the reason and the free space; its partial folder is removed and
`latest` stays on the last good checkpoint. Partial folders of killed saves are removed when the
run is taken up again. The failures are made by a write that raises, as the OS would."""
import errno

import numpy as np
import pytest

from glassformer.cli import main
from glassformer.errors import CheckpointError
from glassformer.io import safetensors as safetensors_io
from glassformer.io.checkpoint import (append_train_log, load_checkpoint, resolve_checkpoint,
                                       save_checkpoint)

TINY_RUN = ["--n-layer", "1", "--n-head", "2", "--d-model", "16", "--block-size", "16",
            "--batch-size", "4", "--eval-iters", "2", "--eval-interval", "2", "--no-progress",
            "--workers", "1"]


def save(run_dir, t: int):
    params = {"w": np.full((4, 4), float(t), dtype=np.float32)}
    return save_checkpoint(run_dir, config={"n": 1}, params=params,
                           optimizer={"m": {"w": params["w"] * 0}, "v": {"w": params["w"] * 0},
                                      "t": t},
                           state={"iter": t}, tokenizer_json={"kind": "char"})


def failing_write(error: OSError):
    """A safetensors writer that starts its file, then fails as the disk would."""
    def write(arrays, path, metadata=None):
        with open(path, "wb") as f:
            f.write(b"partial")
        raise error
    return write


@pytest.mark.parametrize("error, reason", [
    (OSError(errno.ENOSPC, "No space left on device"), "No space left on device"),
    (OSError(errno.EROFS, "Read-only file system"), "Read-only file system")])
def test_a_failed_save_is_one_line_and_keeps_latest(tmp_path, monkeypatch, error, reason):
    good = save(tmp_path, 1)
    monkeypatch.setattr(safetensors_io.safetensors.numpy, "save_file", failing_write(error))
    with pytest.raises(CheckpointError) as raised:
        save(tmp_path, 2)
    message = str(raised.value)
    assert "\n" not in message and str(tmp_path) in message and reason in message
    assert "MB free there" in message and f"latest still names {good.name}" in message
    assert sorted(p.name for p in tmp_path.glob("ckpt-*")) == [good.name]  # no partial folder
    assert not list(tmp_path.glob(".*tmp-*"))
    assert resolve_checkpoint(tmp_path) == good and load_checkpoint(tmp_path).state["iter"] == 1


def test_the_safetensors_packages_own_error_is_one_line_too(tmp_path, monkeypatch):
    from safetensors import SafetensorError
    error = SafetensorError("Error while serializing: I/O error: No space left on device "
                            "(os error 28)")
    monkeypatch.setattr(safetensors_io.safetensors.numpy, "save_file", failing_write(error))
    with pytest.raises(CheckpointError, match=r"in .*: No space left on device \("):
        save(tmp_path, 1)
    assert not list(tmp_path.glob("ckpt-*")) and not (tmp_path / "latest").exists()


def test_a_train_log_that_cannot_grow_is_one_line(tmp_path, monkeypatch):
    import glassformer.io.checkpoint as checkpoint

    def full(fd, data):
        raise OSError(errno.ENOSPC, "No space left on device")
    monkeypatch.setattr(checkpoint.os, "write", full)
    with pytest.raises(CheckpointError, match="cannot write to train_log.jsonl in .*: No space"):
        append_train_log(tmp_path, {"iter": 0})


def test_training_on_a_full_disk_ends_in_one_line_and_resumes(tmp_path, monkeypatch, capsys):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("to be or not to be, that is the question\n" * 40, encoding="utf-8")
    out = tmp_path / "run"
    assert main(["train", "--data", str(corpus), *TINY_RUN, "--out", str(out),
                 "--max-iters", "2"]) == 0
    good = resolve_checkpoint(out)
    (out / "ckpt-00000001-abcdef").mkdir()   # what a save killed half-way leaves
    capsys.readouterr()
    with monkeypatch.context() as patch:
        patch.setattr(safetensors_io.safetensors.numpy, "save_file",
                      failing_write(OSError(errno.ENOSPC, "No space left on device")))
        assert main(["train", "--out", str(out), "--resume", "--max-iters", "4"]) == 2
    err = capsys.readouterr().err.splitlines()
    errors = [line for line in err if "error" in line]
    assert errors == [line for line in err if "No space left on device" in line]
    assert len(errors) == 1 and "Traceback" not in "\n".join(err)
    assert sorted(p.name for p in out.glob("ckpt-*")) == [good.name]  # the stale one went too
    assert main(["train", "--out", str(out), "--resume", "--max-iters", "4"]) == 0
    assert load_checkpoint(out).state["iter"] == 4
