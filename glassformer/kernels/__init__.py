"""Compiled kernels: the loops NumPy cannot fuse, each beside the NumPy twin it must equal.

Decoding one token reads every weight once, so its ceiling is bytes per token over memory
bandwidth. Between the matrix-vector products a layer makes ~40 small NumPy calls (norm, RoPE,
cache write, scores, mask, softmax, weighted sum, residual, activation), each a separate pass with
its own temporaries and its own Python cost. A kernel here does one of those stretches in a single
compiled loop; the products themselves stay BLAS calls.

    choice.py        which path runs: GLASSFORMER_KERNELS=numpy|numba|auto (or `glassformer
                     --kernels ...`); auto is numba when it can be imported. Numba is imported
                     lazily, the first time a kernel is needed, never by `import glassformer`.
    decode_numpy.py  the NumPy twins: each kernel written with the ops (ops/), the reference that
                     explain, gradcheck and the tests use
    decode_numba.py  the same kernels as numba loops, JIT-compiled with cache=True (compiled once
                     per machine, under the user's cache: choice.py's cache_dir)
    decode_layer_numba.py  one decoded row's whole layer in one call (decode_numpy.layer_step's
                     twin): decode_numba's loops and the layer's products, made by NumPy's own
                     OpenBLAS sgemv called from inside the loop
    blas_numba.py    that call: cblas_sgemv found in the BLAS NumPy loaded, named to LLVM (so the
                     disk cache holds no address); absent (FOUND False), layers go call by call

    quant_numba.py   x @ W^T for a few rows (a decode step) read from a quantized W's GGUF blocks
                     (Q8_0, Q4_0, Q4_1, Q5_0, Q4_K), the twin of ops/quant/product.py's
                     rows_t_product; chosen in one place, ops/quant/matrix.py's product
    quant_rows_numba.py  x @ W^T for 2..16 rows (serve's batched decode) of Q8_0, Q4_0, Q4_1:
                     each tile of W's rows widened once and dotted with every row of x (the
                     one-row loops unpack each block once per row); same twin, same chooser
    quant_slabs.py   the many-row quantized products (prefill, backward): product.py's slabs and
                     BLAS, each slab widened by one compiled pass (the same floats as NumPy's)

    prefill.py       a long prefill's fast path, each function with its NumPy twin's name,
                     arguments and results: tiled attention (ops/tiled_attention.py's forward:
                     BLAS products around one compiled exp pass per key chunk), RoPE
                     (ops/rope.py), SwiGLU (activation_numba.py's, training's loop without its
                     ctx: decode_numpy.swiglu_rows' twin); chosen by choice.py's
                     prefill_kernels in blocks/attention.py and blocks/mlp.py
    prefill_numba.py its compiled loops (the masked exp and row sums, RoPE's single pass)
    spread.py        work items (the attention's query tiles) over numba's thread count as
                     Python threads, each with one-thread BLAS products
    exp_numba.py     the one vectorized exponential (expf, exp2f) every compiled loop shares

Every kernel in decode_numba.py has the name, arguments and results of its twin in
decode_numpy.py, and tests/kernels/ checks the two agree. Where the kernels are used is decided
in one place: models/common.py's layers_forward hands a one-token cached step to
blocks/decode_step.py when choice.py says a compiled path is on (docs/performance.md).
"""
