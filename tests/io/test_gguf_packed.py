"""io/gguf.py keeps a file's quantized q | k | v and gate | up packed (blocks/packed.py): one
blocks array each, the logits those of the in-memory round trip (tests/io/test_gguf_quantize.py)."""
import numpy as np
import pytest

pytest.importorskip("gguf", reason="the gguf package reads GGUF files: pip install gguf")

from glassformer.blocks.packed import packed_whole  # noqa: E402
from glassformer.io.gguf_write import quantize_gguf  # noqa: E402
from glassformer.io.pretrained import load_pretrained  # noqa: E402
from glassformer.models.llama import init_params  # noqa: E402
from glassformer.models.model import Model  # noqa: E402
from tests.io.test_gguf_quantize import CFG, IDS, RTOL, in_memory, write_source  # noqa: E402


def test_a_loaded_file_is_packed_and_gives_the_same_logits(tmp_path):
    params = init_params(CFG, np.random.default_rng(5))
    write_source(tmp_path / "f32.gguf", params)
    quantize_gguf(tmp_path / "f32.gguf", "q4_1", tmp_path / "q.gguf")
    model = load_pretrained(tmp_path / "q.gguf", tokenizer=False)
    for i in range(CFG.n_layer):
        qkv = packed_whole([model.params[f"blocks.{i}.attn.w{n}"] for n in "qkv"])
        gate_up = packed_whole([model.params[f"blocks.{i}.mlp.w_{n}"] for n in ("gate", "up")])
        assert qkv.kind == "q4_1" and qkv.shape == (CFG.d_model, CFG.d_model * 2)
        assert gate_up.shape == (CFG.d_model, 2 * CFG.d_ff)
    want = Model(CFG, in_memory(params, "q4_1"))(IDS)
    np.testing.assert_allclose(model(IDS), want, rtol=0, atol=RTOL * np.abs(want).max())
