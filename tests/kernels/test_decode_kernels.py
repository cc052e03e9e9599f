"""Each compiled decode kernel (kernels/decode_numba.py) against its NumPy twin
(kernels/decode_numpy.py), the reference: same arguments, results equal to float32 rounding.

The twins run here too, on both paths: `twin` is parametrized over the two modules, so that the
compiled one is compared with the reference and the reference with itself (a check of the test).
Skipped, with its reason, where numba is not installed (the default install)."""
from __future__ import annotations

import numpy as np
import pytest

from glassformer.kernels import decode_numpy
from glassformer.kernels.choice import decode_kernels, numba_importable

PATHS = ["numpy", pytest.param("numba", marks=pytest.mark.skipif(
    not numba_importable(), reason="numba is not installed (the fast extra)"))]
TOL = dict(rtol=2e-5, atol=2e-5)


@pytest.fixture(params=PATHS)
def twin(request):
    """The module under test: the compiled kernels, or the NumPy twins themselves."""
    return decode_numpy if request.param == "numpy" else decode_kernels("numba")


def floats(rng, *shape):
    return rng.standard_normal(shape, dtype=np.float32)


@pytest.mark.parametrize("rms", [True, False])
@pytest.mark.parametrize("with_bias", [True, False])
def test_norm_and_add_norm(twin, rms, with_bias):
    rng = np.random.default_rng(0)
    x, delta = floats(rng, 3, 40), floats(rng, 3, 40)
    w = floats(rng, 40)
    b = floats(rng, 40) if with_bias and not rms else None
    bias = floats(rng, 40) if with_bias else None
    expected = decode_numpy.norm_rows(x, w, b, 1e-5, rms)
    np.testing.assert_allclose(twin.norm_rows(x, w, b, 1e-5, rms), expected, **TOL)
    h_ref, y_ref = decode_numpy.add_norm_rows(x, delta, bias, w, b, 1e-6, rms)
    h, y = twin.add_norm_rows(x, delta, bias, w, b, 1e-6, rms)
    np.testing.assert_array_equal(h, h_ref)          # one add, or two in the same order
    np.testing.assert_allclose(y, y_ref, **TOL)


def test_swiglu(twin):
    rng = np.random.default_rng(1)
    gate, up = floats(rng, 2, 64) * 4, floats(rng, 2, 64)
    np.testing.assert_allclose(twin.swiglu_rows(gate, up), decode_numpy.swiglu_rows(gate, up),
                               **TOL)


@pytest.mark.parametrize("approximate", [True, False])
@pytest.mark.parametrize("with_bias", [True, False])
def test_gelu(twin, approximate, with_bias):
    rng = np.random.default_rng(2)
    up = floats(rng, 2, 64) * 3
    bias = floats(rng, 64) if with_bias else None
    np.testing.assert_allclose(twin.gelu_rows(up, bias, approximate),
                               decode_numpy.gelu_rows(up, bias, approximate), **TOL)


def attend_inputs(rng, *, rows=2, n_head=6, n_kv=2, d=8, t_max=12, length=7, rope=True,
                  biases=True, masked=True):
    """Arguments of attend_step: a grouped-query layer, its cache filled up to `length`."""
    args = dict(q=floats(rng, rows, n_head * d), k=floats(rng, rows, n_kv * d),
                v=floats(rng, rows, n_kv * d),
                bq=floats(rng, n_head * d) if biases else None,
                bk=floats(rng, n_kv * d) if biases else None,
                bv=floats(rng, n_kv * d) if biases else None,
                cos=np.cos(floats(rng, rows, d)) if rope else None,
                sin=np.sin(floats(rng, rows, d)) if rope else None,
                k_cache=floats(rng, rows, n_kv, t_max, d),
                v_cache=floats(rng, rows, n_kv, t_max, d), length=length, key_mask=None)
    if masked:  # left padding: row 0 sees its keys from column 3 on, row 1 all of them
        mask = np.ones((rows, length + 1), bool)
        mask[0, :3] = False
        args["key_mask"] = mask
    return args


@pytest.mark.parametrize("rope, biases, masked, n_kv", [
    (True, False, False, 2),     # LLaMA / SmolLM2: RoPE, grouped heads, no biases
    (True, True, True, 2),       # Qwen2 in a padded batch
    (False, True, True, 6),      # GPT-2: no RoPE inside attention, one KV head per query head
    (True, False, True, 1),      # multi-query
])
def test_attend_step(twin, rope, biases, masked, n_kv):
    rng = np.random.default_rng(3)
    args = attend_inputs(rng, rope=rope, biases=biases, masked=masked, n_kv=n_kv)
    ref = {**args, "k_cache": args["k_cache"].copy(), "v_cache": args["v_cache"].copy()}
    expected = decode_numpy.attend_step(**ref)
    out = twin.attend_step(**args)
    np.testing.assert_allclose(out, expected, **TOL)
    # the new key (rotated) and value went to column `length`, and nothing else changed
    np.testing.assert_allclose(args["k_cache"], ref["k_cache"], **TOL)
    np.testing.assert_allclose(args["v_cache"], ref["v_cache"], **TOL)


def test_attend_step_row_with_no_key_gives_zeros(twin):
    """A row whose keys are all masked (a free row in serve's batch) outputs zeros, as
    ops/attention.py does, not NaN."""
    rng = np.random.default_rng(4)
    args = attend_inputs(rng)
    args["key_mask"][1] = False
    out = twin.attend_step(**args)
    assert np.all(out[1] == 0.0) and np.all(np.isfinite(out))
