"""glassformer's safetensors reader/writer (through the `safetensors` package): files the
package and torch write, files it writes, BF16/F16 widening, and one-line errors naming the file."""
import json
import re

import numpy as np
import pytest
import safetensors.numpy

from glassformer.errors import CheckpointError
from glassformer.io.safetensors import (load_safetensors, read_safetensors_header,
                                        save_safetensors, widen_to_float32)


def _mixed_tensors(rng):
    return {
        "h.0.attn.c_attn.weight": rng.standard_normal((8, 24)).astype(np.float32),
        "h.0.attn.c_attn.bias": rng.standard_normal(24).astype(np.float32),
        "wte.weight": rng.standard_normal((5, 8)).astype(np.float64),
        "half": rng.standard_normal((3, 2)).astype(np.float16),
        "ids": np.arange(7, dtype=np.int64),
        "ids32": np.arange(-3, 3, dtype=np.int32),
        "bytes": np.arange(10, dtype=np.uint8),
        "mask": np.array([[True, False], [False, True]]),
        "scalar": np.array(2.5, dtype=np.float32),
        "empty": np.zeros((0, 4), dtype=np.float32),
    }


def _expected(array):
    """What load_safetensors returns for a saved array: F16 widened to float32."""
    return array.astype(np.float32) if array.dtype == np.float16 else array


def _write_raw(path, header, data):
    """A safetensors file from a header dict and data bytes, for corrupt-file tests."""
    header_bytes = json.dumps(header).encode()
    path.write_bytes(len(header_bytes).to_bytes(8, "little") + header_bytes + data)


def test_reads_files_written_by_the_package(tmp_path):
    tensors = _mixed_tensors(np.random.default_rng(0))
    safetensors.numpy.save_file(tensors, tmp_path / "ref.safetensors", metadata={"a": "b"})
    loaded = load_safetensors(tmp_path / "ref.safetensors")
    assert loaded.keys() == tensors.keys()
    for key, array in tensors.items():
        assert loaded[key].dtype == _expected(array).dtype, key
        assert loaded[key].shape == array.shape, key
        np.testing.assert_array_equal(loaded[key], _expected(array))
    assert read_safetensors_header(tmp_path / "ref.safetensors").metadata == {"a": "b"}


def test_writes_files_the_package_reads(tmp_path):
    tensors = _mixed_tensors(np.random.default_rng(1))
    tensors["big_endian"] = np.arange(5, dtype=">f4")
    tensors["transposed"] = np.arange(15, dtype=np.float32).reshape(3, 5).T  # not C-contiguous
    tensors["strided"] = np.arange(20, dtype=np.int64)[::3]
    save_safetensors(tmp_path / "ours.safetensors", tensors, metadata={"format": "np"})
    ref = safetensors.numpy.load_file(tmp_path / "ours.safetensors")
    assert ref.keys() == tensors.keys()
    for key, array in tensors.items():
        np.testing.assert_array_equal(ref[key], array)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ours.safetensors"]  # no temp left
    (tmp_path / "plain").write_bytes(b"")
    mode = (tmp_path / "plain").stat().st_mode  # what the umask gives any new file
    assert (tmp_path / "ours.safetensors").stat().st_mode == mode  # the package's 0600 undone
    (tmp_path / "plain").unlink()
    header = read_safetensors_header(tmp_path / "ours.safetensors")
    assert header.metadata == {"format": "np"}
    assert header.tensors["transposed"] == ("F32", (5, 3))


def test_loaded_arrays_are_writable_and_the_file_unchanged(tmp_path):
    path = tmp_path / "w.safetensors"
    save_safetensors(path, {"w": np.ones((4, 4), np.float32)})
    before = path.read_bytes()
    w = load_safetensors(path)["w"]
    assert w.flags.writeable
    w += 1.0  # an optimizer updates loaded params in place
    assert np.all(w == 2.0) and path.read_bytes() == before


def test_torch_bf16_f16_and_f32_load_to_the_same_float32(tmp_path):
    torch = pytest.importorskip("torch")
    safetensors_torch = pytest.importorskip("safetensors.torch")
    gen = torch.Generator().manual_seed(0)
    base = torch.randn(16, 8, generator=gen) * 100
    special = torch.tensor([0.0, -0.0, float("inf"), float("-inf"), 1e-40, 3.0e38])
    tensors = {"bf16": base.to(torch.bfloat16), "f16": base.to(torch.float16),
               "f32": base, "special_bf16": special.to(torch.bfloat16),
               "i64": torch.arange(5), "flag": torch.tensor([True, False])}
    safetensors_torch.save_file(tensors, tmp_path / "t.safetensors")
    loaded = load_safetensors(tmp_path / "t.safetensors")
    for key, tensor in tensors.items():
        want = tensor.float().numpy() if tensor.is_floating_point() else tensor.numpy()
        assert loaded[key].dtype == want.dtype, key
        np.testing.assert_array_equal(loaded[key], want)
    nan = torch.tensor([float("nan")], dtype=torch.bfloat16)
    safetensors_torch.save_file({"nan": nan}, tmp_path / "nan.safetensors")
    assert np.isnan(load_safetensors(tmp_path / "nan.safetensors")["nan"]).all()


def test_widen_to_float32_bf16_bits():
    bits = np.array([0x3F80, 0xC000, 0x0000], dtype=np.uint16)  # 1.0, -2.0, 0.0 in bf16
    assert widen_to_float32(bits, "BF16").tolist() == [1.0, -2.0, 0.0]
    assert widen_to_float32(np.array([0.5], np.float16), "F16").dtype == np.float32


def test_reads_only_the_tensors_asked_for(tmp_path):
    path = tmp_path / "some.safetensors"
    save_safetensors(path, {"a": np.ones(2, np.float32), "b": np.zeros(3, np.int64)})
    assert list(load_safetensors(path, ["b"])) == ["b"]
    with pytest.raises(CheckpointError, match="some.safetensors has no tensor 'c'"):
        load_safetensors(path, ["a", "c"])


def test_bf16_after_another_tensor_is_read_at_its_offset(tmp_path):
    path = tmp_path / "bf16.safetensors"
    ones = np.ones(2, np.float32).tobytes()
    bits = np.array([0x3F80, 0xC000, 0x7F80], dtype="<u2").tobytes()  # 1.0, -2.0, inf
    _write_raw(path, {"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                      "b": {"dtype": "BF16", "shape": [3], "data_offsets": [8, 14]}}, ones + bits)
    loaded = load_safetensors(path)
    assert loaded["a"].tolist() == [1.0, 1.0]
    assert loaded["b"].dtype == np.float32 and loaded["b"].tolist() == [1.0, -2.0, np.inf]


def test_truncated_file_names_the_file_and_the_problem(tmp_path):
    path = tmp_path / "model.safetensors"
    save_safetensors(path, {"h.0.attn.c_attn.weight": np.zeros((768, 2304), np.float32)})
    data = path.read_bytes()
    header_end = 8 + int.from_bytes(data[:8], "little")
    path.write_bytes(data[:header_end + 1000])
    # the package checks the byte ranges; its message names no tensor, ours adds the file
    with pytest.raises(CheckpointError, match=r"model.safetensors is truncated or corrupt: its "
                       r"tensors do not cover its data bytes exactly"):
        load_safetensors(path)
    path.write_bytes(data[:header_end - 5])
    with pytest.raises(CheckpointError, match="truncated: the header needs"):
        read_safetensors_header(path)
    path.write_bytes(data[:3])
    with pytest.raises(CheckpointError, match="truncated: a safetensors file starts"):
        load_safetensors(path)


# The package validates headers; each message is its problem, after the file's name.
@pytest.mark.parametrize("header, data, message", [
    ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}}, b"\0" * 4,
     "invalid shape, data type, or offset for tensor"),
    ({"a": {"dtype": "F8_E4M3", "shape": [2], "data_offsets": [0, 2]}}, b"\0" * 2,
     "cannot read"),
    ({"a": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}}, b"\0" * 4,
     "invalid value: integer `-1`"),
    ({"a": {"dtype": "F32", "shape": [1]}}, b"\0" * 4, "missing field `data_offsets`"),
    ({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
      "b": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, b"\0" * 8,
     "invalid offset for tensor `b`"),                                  # overlap
    ({"a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}}, b"\0" * 8,
     "invalid offset for tensor `a`"),                                  # gap
    ({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}, b"\0" * 8,
     "do not cover its data bytes exactly"),                            # trailing bytes
    ({"m": {"dtype": "BOOL", "shape": [2], "data_offsets": [0, 2]}}, b"\0\7", "other than 0"),
    ({"__metadata__": {"n": 1}}, b"", "expected a string"),
])
def test_corrupt_headers_are_rejected(tmp_path, header, data, message):
    path = tmp_path / "bad.safetensors"
    _write_raw(path, header, data)
    with pytest.raises(CheckpointError, match=r"bad\.safetensors\b.*" + re.escape(message)):
        load_safetensors(path)


def test_not_json_duplicates_pickles_and_missing(tmp_path):
    path = tmp_path / "bad.safetensors"
    path.write_bytes((5).to_bytes(8, "little") + b"{nope")
    with pytest.raises(CheckpointError, match="bad.safetensors is corrupt: invalid JSON"):
        load_safetensors(path)
    text = b'{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},' \
           b'"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}'
    path.write_bytes(len(text).to_bytes(8, "little") + text + b"\0")
    with pytest.raises(CheckpointError, match="duplicate key 'a'"):
        load_safetensors(path)
    path.write_bytes(b"PK\x03\x04\x14\x00\x08\x08" + b"\0" * 100)  # what torch.save writes
    with pytest.raises(CheckpointError, match="never unpickles"):
        load_safetensors(path)
    path.write_bytes(b"\x80\x02\x8a\x0al\xfc\x9cF\xf9 j\xa8" + b"\0" * 100)  # a raw pickle
    with pytest.raises(CheckpointError, match="never unpickles"):
        load_safetensors(path)
    path.write_bytes(b"\xff" * 16)
    with pytest.raises(CheckpointError, match="not a safetensors file"):
        load_safetensors(path)
    with pytest.raises(CheckpointError, match="no such file"):
        load_safetensors(tmp_path / "missing.safetensors")


def test_save_rejects_what_safetensors_cannot_hold(tmp_path):
    with pytest.raises(CheckpointError, match="complex64 is not one glassformer reads back"):
        save_safetensors(tmp_path / "x.safetensors", {"c": np.zeros(2, np.complex64)})
    with pytest.raises(CheckpointError, match="map str to str"):
        save_safetensors(tmp_path / "x.safetensors", {}, metadata={"n": 1})
    assert not list(tmp_path.iterdir())
