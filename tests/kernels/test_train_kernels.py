"""The compiled training kernels (kernels/train_numba.py) against their NumPy twins, the
reference: LayerNorm (ops/layer_norm.py), the tanh GELU (ops/activation.py) and one parameter's
AdamW update (train/optim.py's adamw_update); then a whole training step on both paths.

Skipped, with its reason, where numba is not installed (the default install)."""
from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from glassformer.errors import GlassformerError
from glassformer.gradcheck import run_case
from glassformer.gradcheck.cases._weight_bias import weight_bias_case
from glassformer.kernels.choice import KERNELS_ENV, numba_importable, train_kernels
from glassformer.models import gpt2, llama
from glassformer.ops import activation, layer_norm, rms_norm, softmax, swiglu
from glassformer.ops.attention import causal_mask
from glassformer.train.optim import adamw_init, adamw_update
from glassformer.train.step import loss_and_grads, train_step

pytestmark = pytest.mark.skipif(not numba_importable(),
                                reason="numba is not installed (the fast extra)")
TOL32 = dict(rtol=2e-5, atol=2e-6)


@pytest.fixture(scope="module")
def compiled():
    return train_kernels("numba")


@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_layer_norm_matches_its_twin(compiled, bias, dtype):
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((3, 5, 40)) * 3 + 1).astype(dtype)
    w, b = rng.standard_normal(40).astype(dtype), rng.standard_normal(40).astype(dtype)
    b = b if bias else None
    tol = TOL32 if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)
    y_ref, ctx_ref = layer_norm.layer_norm_forward(x, w, b, eps=1e-5)
    y, ctx = compiled.layer_norm_forward(x, w, b, eps=1e-5)
    assert y.dtype == dtype and ctx.rstd.shape == ctx_ref.rstd.shape == (3, 5, 1)
    np.testing.assert_allclose(y, y_ref, **tol)
    np.testing.assert_allclose(ctx.xhat, ctx_ref.xhat, **tol)
    dy = rng.standard_normal(x.shape).astype(dtype)
    for got, want in zip(compiled.layer_norm_backward(dy, ctx),
                         layer_norm.layer_norm_backward(dy, ctx_ref)):
        if want is None:
            assert got is None
        else:
            np.testing.assert_allclose(got, want, **tol)


@pytest.mark.parametrize("bias", [True, False])
def test_layer_norm_kernels_pass_the_gradient_check(compiled, bias):
    case = weight_bias_case("layer_norm", "compiled", compiled.layer_norm_forward,
                            compiled.layer_norm_backward, x_shape=(2, 3, 5), w_shape=(5,),
                            bias=bias)
    result = run_case(case)
    assert result.max_rel_err < 1e-6, result.per_input


def test_layer_norm_kernel_fails_as_the_op_does(compiled):
    x = np.ones((2, 4), np.float32)
    with pytest.raises(GlassformerError, match="same dtype|dtype"):
        compiled.layer_norm_forward(x, np.ones(4), None)
    with pytest.raises(GlassformerError, match="eps"):
        compiled.layer_norm_forward(x, np.ones(4, np.float32), None, eps=-1.0)
    # a view the kernel does not take runs the twin, with the same numbers
    view = np.ones((4, 8), np.float32)[:, ::2]
    y, _ = compiled.layer_norm_forward(view, np.ones(4, np.float32))
    np.testing.assert_array_equal(y, layer_norm.layer_norm_forward(view, np.ones(4, np.float32))[0])


def test_tanh_gelu_matches_its_twin(compiled):
    x = np.concatenate([np.linspace(-30, 30, 60_032, dtype=np.float32),
                        np.random.default_rng(1).standard_normal(4_096).astype(np.float32) * 3])
    x = x.reshape(-1, 64)
    out_ref, ctx_ref = activation.gelu_forward(x, approximate="tanh")
    out, ctx = compiled.gelu_forward(x, approximate="tanh")
    np.testing.assert_allclose(out, out_ref, rtol=2e-5, atol=1e-6)
    np.testing.assert_allclose(ctx.slope, ctx_ref.slope, rtol=2e-5, atol=5e-6)
    assert np.isfinite(out).all() and np.isfinite(ctx.slope).all()
    inference, no_ctx = compiled.gelu_forward(x, approximate="tanh", keep_slope=False)
    assert no_ctx.slope is None
    np.testing.assert_array_equal(inference, out)


@pytest.mark.parametrize("approximate, dtype", [("none", np.float32), ("tanh", np.float64)])
def test_gelu_the_kernel_does_not_take_runs_the_twin(compiled, approximate, dtype):
    x = np.random.default_rng(2).standard_normal((4, 16)).astype(dtype)
    out, ctx = compiled.gelu_forward(x, approximate=approximate)
    out_ref, ctx_ref = activation.gelu_forward(x, approximate=approximate)
    np.testing.assert_array_equal(out, out_ref)
    np.testing.assert_array_equal(ctx.slope, ctx_ref.slope)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shrink", [1.0, 1.0 - 1e-3 * 0.1])
def test_adamw_update_is_bit_identical(compiled, dtype, shrink):
    rng = np.random.default_rng(3)
    arrays = [rng.standard_normal((33, 17)).astype(dtype) for _ in range(3)]
    arrays.append(np.abs(rng.standard_normal((33, 17))).astype(dtype) * 0.01)   # v >= 0
    hyper = dict(shrink=shrink, beta1=0.9, beta2=0.99, step_size=1e-3 / (1 - 0.9 ** 3),
                 bias_correction2_sqrt=(1 - 0.99 ** 3) ** 0.5, eps=1e-8)
    mine, twin = [a.copy() for a in arrays], [a.copy() for a in arrays]
    assert compiled.adamw_update(*mine, **hyper)
    adamw_update(*twin, **hyper)
    for got, want in zip(mine, twin):
        np.testing.assert_array_equal(got, want)


def test_adamw_update_leaves_views_to_the_twin(compiled):
    p = np.ones((4, 8), np.float32)[:, ::2]
    g, m, v = (np.ones((4, 4), np.float32) for _ in range(3))
    before = p.copy()
    assert not compiled.adamw_update(p, g, m, v, shrink=1.0, beta1=0.9, beta2=0.99,
                                     step_size=1e-3, bias_correction2_sqrt=0.1, eps=1e-8)
    np.testing.assert_array_equal(p, before)


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_training_agrees_on_both_paths(monkeypatch, family):
    """A small GPT (LayerNorm with bias, tanh GELU) or Llama (RMSNorm, SwiGLU), AdamW with
    decay, on each path: the same
    gradients to float32 rounding, and the same losses over three steps. (Params are not
    compared after AdamW: its first steps move every weight by about lr whatever the size of
    its gradient, so a near-zero gradient's rounding shows as a large relative change.)"""
    module = {"gpt2": gpt2, "llama": llama}[family]
    cfg = (gpt2.GPT2Config(vocab_size=31, max_seq_len=16, n_layer=2, n_head=2, d_model=32)
           if family == "gpt2" else
           llama.LlamaConfig(vocab_size=31, max_seq_len=16, n_layer=2, n_head=4, n_kv_head=2,
                             d_model=32))
    rng = np.random.default_rng(4)
    batches = [(rng.integers(0, 31, (3, 16)), rng.integers(0, 31, (3, 16))) for _ in range(3)]
    results = {}
    for path in ("numpy", "numba"):
        monkeypatch.setenv(KERNELS_ENV, path)
        params = module.init_params(cfg, np.random.default_rng(5))
        _, grads = loss_and_grads(module, params, cfg, *batches[0], rng=None)
        opt, losses = adamw_init(params), []
        for x, y in batches:
            loss, opt, _ = train_step(module, params, cfg, [(x, y)], opt, rng=None, grad_clip=1.0,
                                      lr=1e-2, weight_decay=0.1)
            losses.append(loss)
        results[path] = losses, grads
    np.testing.assert_allclose(results["numba"][0], results["numpy"][0], rtol=1e-5)
    for key, want in results["numpy"][1].items():
        got = results["numba"][1][key]
        # + 1e-7: a key bias's gradient is 0 in exact arithmetic (softmax ignores a shift), so
        # both paths give rounding noise there
        assert np.abs(got - want).max() <= 1e-4 * np.abs(want).max() + 1e-7, key


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_rms_norm_matches_its_twin(compiled, dtype):
    rng = np.random.default_rng(6)
    x, w = rng.standard_normal((2, 7, 48)).astype(dtype), rng.standard_normal(48).astype(dtype)
    tol = TOL32 if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)
    y_ref, ctx_ref = rms_norm.rms_norm_forward(x, w, eps=1e-6)
    y, ctx = compiled.rms_norm_forward(x, w, eps=1e-6)
    np.testing.assert_allclose(y, y_ref, **tol)
    np.testing.assert_allclose(ctx.rstd, ctx_ref.rstd, **tol)
    dy = rng.standard_normal(x.shape).astype(dtype)
    for got, want in zip(compiled.rms_norm_backward(dy, ctx),
                         rms_norm.rms_norm_backward(dy, ctx_ref)):
        np.testing.assert_allclose(got, want, **tol)


def test_rms_norm_kernels_pass_the_gradient_check(compiled):
    case = weight_bias_case("rms_norm", "compiled",
                            lambda x, w, b: compiled.rms_norm_forward(x, w, eps=1e-6),
                            lambda dy, ctx: (*compiled.rms_norm_backward(dy, ctx), None),
                            x_shape=(2, 3, 5), w_shape=(5,), bias=False)
    result = run_case(case)
    assert result.max_rel_err < 1e-6, result.per_input


@pytest.mark.parametrize("layout", ["separate", "packed", "strided"])
def test_swiglu_matches_its_twin(compiled, layout):
    """gate and up as two arrays, as the halves of one packed gate|up product (what a loaded
    Llama's MLP hands over), or as views the kernel does not take (the twin runs)."""
    rng = np.random.default_rng(7)
    both = rng.standard_normal((3, 5, 2 * 40)).astype(np.float32) * 4
    if layout == "separate":
        gate, up = both[..., :40].copy(), both[..., 40:].copy()
    elif layout == "packed":
        gate, up = both[..., :40], both[..., 40:]
    else:
        gate, up = both[..., ::2], both[..., 1::2]
    out_ref, ctx_ref = swiglu.swiglu_forward(gate, up)
    out, ctx = compiled.swiglu_forward(gate, up)
    np.testing.assert_allclose(out, out_ref, **TOL32)
    np.testing.assert_allclose(ctx.silu.sigmoid, ctx_ref.silu.sigmoid, **TOL32)
    dout = rng.standard_normal(out.shape).astype(np.float32)
    for mine in (ctx, ctx_ref):                      # the backward takes either ctx
        for got, want in zip(compiled.swiglu_backward(dout, mine),
                             swiglu.swiglu_backward(dout, ctx_ref)):
            np.testing.assert_allclose(got, want, **TOL32)


def test_swiglu_kernel_fails_as_the_op_does(compiled):
    with pytest.raises(GlassformerError):
        compiled.swiglu_forward(np.ones((2, 4), np.float32), np.ones((2, 5), np.float32))


@pytest.mark.parametrize("masked", ["causal", "none", "window"])
def test_softmax_matches_its_twin(compiled, masked):
    rng = np.random.default_rng(8)
    x = rng.standard_normal((2, 3, 16, 16)).astype(np.float32) * 4
    mask = {"causal": causal_mask(16, 16), "none": None, "window": causal_mask(16, 16, 3)}[masked]
    p_ref, ctx_ref = softmax.softmax_forward(x, mask=mask)
    p, ctx = compiled.softmax_forward(x, mask=mask)
    np.testing.assert_allclose(p, p_ref, **TOL32)
    dp = rng.standard_normal(x.shape).astype(np.float32)
    np.testing.assert_allclose(compiled.softmax_backward(dp, ctx),
                               softmax.softmax_backward(dp, ctx_ref), **TOL32)


def test_softmax_kernel_shifts_rows_that_need_it(compiled):
    """Rows whose unshifted exps overflow or underflow, and a row with nothing allowed."""
    x = np.array([[1000.0, 0.0, -5.0], [-1000.0, -1001.0, -2000.0], [1.0, 2.0, 3.0],
                  [0.0, 0.0, 0.0]], np.float32)[None]
    mask = np.array([[1, 1, 1], [1, 1, 0], [0, 1, 1], [0, 0, 0]], bool)
    np.testing.assert_allclose(compiled.softmax_forward(x, mask=mask)[0],
                               softmax.softmax_forward(x, mask=mask)[0], rtol=1e-6, atol=1e-30)


def test_numba_writes_nothing_to_a_terminal_at_exit(tmp_path):
    """Numba's error highlighting (colorama) would end a terminal's stdout with an ANSI reset;
    an MPI rank's stdout is a pty, and commands print one JSON line last."""
    script = ("import pty, os, sys\n"
              "pid, fd = pty.fork()\n"
              "if pid == 0:\n"
              "    import numpy as np\n"
              "    from glassformer.kernels.choice import train_kernels\n"
              "    train_kernels('numba').softmax_forward(np.ones((2, 2), np.float32))\n"
              "    print('last')\n"
              "    sys.exit(0)\n"          # atexit handlers run: colorama's would write here
              "out = b''\n"
              "while True:\n"
              "    try:\n"
              "        chunk = os.read(fd, 1024)\n"
              "    except OSError:\n"
              "        break\n"
              "    if not chunk:\n"
              "        break\n"
              "    out += chunk\n"
              "sys.stdout.write(repr(out))\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120, check=True)
    assert "\\x1b" not in done.stdout and "last" in done.stdout
