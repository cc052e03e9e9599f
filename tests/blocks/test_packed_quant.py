"""blocks/packed.py on weights kept in GGUF blocks: q | k | v and gate | up of one kind stack W's
rows into one blocks array, so one product gives the three (or two) side by side, on the NumPy
reference and the compiled products, for one row, a few rows (serve) and a prefill's many; mixed
kinds stay unpacked. Also io/mapped.py, which hands back the copied originals' pages."""
from __future__ import annotations

import numpy as np
import pytest

import glassformer.models.common as common
from glassformer.blocks.decode_plan import layer_operands
from glassformer.blocks.names import sub_params
from glassformer.blocks.packed import pack_columns, packed_whole, stackable
from glassformer.generate.generate import generate
from glassformer.io.mapped import release_pages
from glassformer.kernels.choice import KERNELS_ENV, numba_importable
from glassformer.models import llama
from glassformer.models.layout import lay_out_for_decoding
from glassformer.models.model import Model
from glassformer.ops.quant import QuantizedMatrix, quantize_matrix, quantize_weight

PATHS = ["numpy", pytest.param("numba", marks=pytest.mark.skipif(
    not numba_importable(), reason="numba is not installed (the fast extra)"))]


def records(kinds=("q4_1", "q4_1", "q4_1"), widths=(64, 32, 32), cols=64, seed=0):
    rng = np.random.default_rng(seed)
    return [quantize_weight(rng.standard_normal((cols, width), dtype=np.float32), kind)
            for kind, width in zip(kinds, widths)]                      # W^T (C, R_i) each


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("n", [1, 3, 40])          # a token, serve's rows, a prefill's slabs
def test_stacked_rows_give_the_parts_products_side_by_side(monkeypatch, path, n):
    monkeypatch.setenv(KERNELS_ENV, path)
    parts = records()
    packed = pack_columns(parts)
    assert all(isinstance(p, QuantizedMatrix) and p.shape == q.shape and p.kind == q.kind
               and np.array_equal(p.blocks, q.blocks) for p, q in zip(packed, parts))
    whole = packed_whole(packed)
    assert whole.shape == (64, 128) and whole.blocks is packed[0].blocks.base
    x = np.random.default_rng(1).standard_normal((n, 64), dtype=np.float32)
    expected = np.concatenate([x @ part for part in parts], axis=1)     # (n, 128)
    np.testing.assert_allclose(x @ whole, expected, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(whole.dequantize(),
                                  np.concatenate([p.dequantize() for p in parts], axis=1))


def test_only_consecutive_records_of_one_kind_are_one_record():
    a, b, c = pack_columns(records())
    assert packed_whole([b, a, c]) is None and packed_whole([a, c]) is None
    assert packed_whole(records()) is None                              # separate arrays
    assert packed_whole([a.T, b.T, c.T]) is None                         # not W^T records
    assert packed_whole([a, b, records()[2]]) is None                    # one replaced
    mixed = records(kinds=("q4_1", "q4_1", "q8_0"))
    assert not stackable(mixed) and not stackable([a.T, b.T])
    with pytest.raises(ValueError):
        pack_columns(mixed)


def quantized_llama(kinds: dict | None = None) -> Model:
    """A tiny LLaMA with every projection in Q4_1 blocks (kinds: suffix -> another format)."""
    cfg = llama.LlamaConfig(vocab_size=48, n_layer=2, n_head=2, n_kv_head=1, d_model=64,
                            d_ff=96, tie_embeddings=True)
    params = llama.init_params(cfg, np.random.default_rng(0))
    for name, value in list(params.items()):
        kind = next((k for suffix, k in (kinds or {}).items() if name.endswith(suffix)), "q4_1")
        if name == "tok_emb":
            params[name] = quantize_matrix(value, "q8_0")
        elif value.ndim == 2:
            params[name] = quantize_weight(value, kind)                # (in, out) -> W^T
    return Model(cfg, params)


def counted_tokens(monkeypatch, model: Model, steps: int = 6) -> tuple[list, int]:
    """Greedy tokens, and the quantized products of one decoded step."""
    calls = []
    product = QuantizedMatrix.__rmatmul__
    monkeypatch.setattr(QuantizedMatrix, "__rmatmul__",
                        lambda self, x: calls.append(1) or product(self, x))
    tokens = generate(model, np.array([[1, 2, 3, 4]]), max_new_tokens=steps, temperature=0.0)
    out = [next(tokens).tolist()]
    calls.clear()
    out.append(next(tokens).tolist())
    per_step = len(calls)
    return out + [t.tolist() for t in tokens], per_step


@pytest.mark.parametrize("path", PATHS)
def test_a_packed_quantized_model_decodes_the_same_tokens_with_fewer_products(monkeypatch, path):
    monkeypatch.setenv(KERNELS_ENV, path)
    model = quantized_llama()
    packed = Model(model.cfg, dict(model.params))
    lay_out_for_decoding(packed.params)
    ops = layer_operands(sub_params(packed.params, "blocks.0."))
    assert ops.qkv is not None and ops.gate_up is not None
    expected, before = counted_tokens(monkeypatch, model)
    tokens, after = counted_tokens(monkeypatch, packed)
    assert tokens == expected
    assert (before, after) == (2 * 7 + 1, 2 * 4 + 1)       # per layer 7 -> 4, and the head
    fused = common.decode_step_forward
    steps = []
    monkeypatch.setattr(common, "decode_step_forward",
                        lambda *a, **k: steps.append(1) or fused(*a, **k))
    ids = np.array([[5, 1, 4, 1, 5, 9, 2, 6], [3, 5, 8, 9, 7, 9, 3, 2]])
    # a prompt (the joined products: blocks/qkv.py, blocks/mlp.py), then one decoded step
    for mine, theirs in zip(decoded_logits(packed, ids), decoded_logits(model, ids)):
        np.testing.assert_allclose(mine, theirs, rtol=1e-5, atol=1e-5)
    assert bool(steps) == (path == "numba")                 # the fused step ran where compiled


def decoded_logits(model: Model, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the prompt ids[:, :-1]'s logits, then the decoded step's of ids[:, -1:]) with a cache."""
    cache = model.new_cache(ids.shape[0], ids.shape[1])
    prompt, _ = model.forward(ids[:, :-1], kv_cache=cache)
    cache.advance(ids.shape[1] - 1)
    step, _ = model.forward(ids[:, -1:], kv_cache=cache, last_only=True)
    return prompt, step


def test_mixed_kinds_stay_unpacked():
    model = quantized_llama({"attn.wv": "q8_0"})
    released = []
    lay_out_for_decoding(model.params, release=released.append)
    ops = layer_operands(sub_params(model.params, "blocks.0."))
    assert ops.qkv is None and ops.gate_up is not None
    assert len(released) == 2 and all(len(group) == 2 for group in released)   # gate|up a layer


def test_released_pages_leave_the_values_readable(tmp_path):
    values = np.arange(1 << 16, dtype=np.float32)                      # 256 KiB
    values.tofile(tmp_path / "map.bin")
    mapped = np.memmap(tmp_path / "map.bin", dtype=np.float32, mode="r")
    assert mapped.sum() == values.sum()                                # every page touched
    view = mapped[100:60000]
    released = release_pages(view)
    assert 0 < released <= view.nbytes and released % 4096 == 0
    np.testing.assert_array_equal(mapped, values)                      # read back from the file
    assert release_pages(values) == 0 and release_pages(mapped[3:5]) == 0
