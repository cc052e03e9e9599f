"""`explain quant`: one block of each GGUF format of ops/quant/ (Q8_0, Q4_0, Q4_1, Q4_K), by hand.

The same seeded weights are quantized by each format's `quantize` and read back by its
`dequantize`; every number a block stores is shown (its float16 scale, minimum, codes, raw
bytes) with the arithmetic that turns it back into weights and the error it leaves. The backward
shows why LoRA can train on a quantized base: the blocks take no gradient, and the input's
gradient dx = G W reads them exactly as the forward's y = x W^T does.
"""
from __future__ import annotations

import numpy as np

from glassformer.explain.core import Pair, Part, Setup, normal, shape_of, step, with_common
from glassformer.ops.quant import QuantizedMatrix, q4_0, q4_1, q4_k, q8_0

WEIGHT_STD = 0.05      # the spread of a trained model's weights, roughly

TEXT = with_common({
    "en": {
        "title": "Quantized weights (ops/quant/: GGUF's Q8_0, Q4_0, Q4_1, Q4_K)",
        "w": "32 weights of one row: a block. Every format stores a row as blocks of 32 (Q4_K: "
             "256) weights, each block with its own scale, so one large weight only coarsens its "
             "own block.",
        "q8_0_d": "Q8_0 scale d = max|w| / 127, stored as float16 (2 bytes).",
        "q8_0_codes": "Q8_0 codes: round(w / d), int8 in -127..127, one byte each: 34 bytes for "
                      "32 weights (8.5 bits a weight).",
        "q8_0_back": "Q8_0 read back: w = d * code. Error at most d / 2.",
        "q4_0_d": "Q4_0 scale d = (the weight of largest magnitude, signed) / -8, float16.",
        "q4_0_codes": "Q4_0 codes: trunc(w / d + 8.5) in 0..15, two a byte (weight j in byte j's "
                      "low nibble, weight j + 16 in its high nibble): 18 bytes, 4.5 bits a weight.",
        "q4_0_bytes": "The 18 bytes as stored: d (2 bytes, float16), then the 16 bytes of codes.",
        "q4_0_back": "Q4_0 read back: w = d * (code - 8), so 16 levels centred on zero.",
        "q4_1_dm": "Q4_1 scale and minimum: m = min w, d = (max w - min w) / 15, both float16.",
        "q4_1_codes": "Q4_1 codes: trunc((w - m) / d + 0.5) in 0..15: 20 bytes, 5 bits a weight. "
                      "SmolLM2's shipped file stores its projections so.",
        "q4_1_back": "Q4_1 read back: w = d * code + m: the 16 levels span exactly [min, max].",
        "k_w": "Q4_K works on 256 weights (a super-block) as 8 sub-blocks of 32: these are the "
               "first 32 of 256 drawn the same way.",
        "k_scales": "Q4_K's 8 sub-block scales and 8 minimums, each a 6-bit integer 0..63 "
                    "(packed into 12 bytes). Each is chosen by a small search (llama.cpp's "
                    "make_qkx2_quants) for the least weighted squared error of its sub-block.",
        "k_dd": "The two float16 numbers the super-block shares: d scales the 6-bit scales, dmin "
                "the 6-bit minimums. 144 bytes for 256 weights: 4.5 bits a weight.",
        "k_codes": "Q4_K codes of sub-block 0, 0..15.",
        "k_back": "Q4_K read back: w = (d * sc_j) * code - (dmin * m_j) for sub-block j.",
        "errors": "Largest error |w - read back| of each format on these weights (Q8_0, Q4_0, "
                  "Q4_1, Q4_K over its 256). Fewer bits, coarser steps.",
        "x": "An input row x, to multiply by the Q4_1 block as a one-row weight W.",
        "y": "y = x W^T computed from the blocks: the product widens W a slab of rows at a "
             "time into scratch memory, never the whole matrix (ops/quant/product.py); with "
             "numba, a decode step's few rows use a compiled twin that never widens W: for "
             "Q8_0, Q4_0 and Q4_1 a block adds d * sum(code * x) (plus m, or -8 d, times the "
             "block's sum of x), four rows of W at a time (kernels/quant_numba.py); a prefill's "
             "many rows keep the slabs and BLAS, each slab widened by one compiled pass "
             "(kernels/quant_slabs.py).",
        "dx": "The blocks take no gradient (rounding has none). y = x W^T with W "
              "quantized: the blocks are frozen (no dW: LoRA trains "
              "float32 adapters beside them) and dx = G W reads the same blocks, a slab of rows "
              "at a time (ops/quant/product.py).",
    },
    "zh": {
        "title": "量化权重（ops/quant/：GGUF 的 Q8_0、Q4_0、Q4_1、Q4_K）",
        "w": "一行中的 32 个权重：一个块。每种格式都把一行存成若干 32 个（Q4_K 为 256 个）权重的块，"
             "每块有自己的缩放因子，所以一个特别大的权重只会让它所在的块变粗。",
        "q8_0_d": "Q8_0 的缩放 d = max|w| / 127，以 float16 存储（2 字节）。",
        "q8_0_codes": "Q8_0 的编码：round(w / d)，int8，范围 -127..127，每个一字节：32 个权重占 "
                      "34 字节（每个权重 8.5 位）。",
        "q8_0_back": "Q8_0 读回：w = d * code。误差不超过 d / 2。",
        "q4_0_d": "Q4_0 的缩放 d =（绝对值最大的那个权重，带符号）/ -8，float16。",
        "q4_0_codes": "Q4_0 的编码：trunc(w / d + 8.5)，范围 0..15，每字节两个（第 j 个权重在第 j "
                      "字节的低 4 位，第 j + 16 个在高 4 位）：18 字节，每个权重 4.5 位。",
        "q4_0_bytes": "实际存储的 18 个字节：先是 d（2 字节 float16），再是 16 字节编码。",
        "q4_0_back": "Q4_0 读回：w = d * (code - 8)，即以零为中心的 16 个等级。",
        "q4_1_dm": "Q4_1 的缩放和最小值：m = min w，d = (max w - min w) / 15，都是 float16。",
        "q4_1_codes": "Q4_1 的编码：trunc((w - m) / d + 0.5)，范围 0..15：20 字节，每个权重 5 位。"
                      "SmolLM2 自带的文件就是这样存投影矩阵的。",
        "q4_1_back": "Q4_1 读回：w = d * code + m：16 个等级正好覆盖 [min, max]。",
        "k_w": "Q4_K 以 256 个权重为一个超块，分成 8 个 32 个权重的子块：这里是同样方式抽取的 256 "
               "个中的前 32 个。",
        "k_scales": "Q4_K 的 8 个子块缩放和 8 个子块最小值，各是 0..63 的 6 位整数（打包进 12 "
                    "字节）。每个都由一个小搜索（llama.cpp 的 make_qkx2_quants）选出，使该子块的"
                    "加权平方误差最小。",
        "k_dd": "超块共享的两个 float16：d 缩放那些 6 位缩放值，dmin 缩放那些 6 位最小值。256 个"
                "权重占 144 字节：每个权重 4.5 位。",
        "k_codes": "Q4_K 第 0 个子块的编码，0..15。",
        "k_back": "Q4_K 读回：第 j 个子块中 w = (d * sc_j) * code - (dmin * m_j)。",
        "errors": "各格式在这些权重上的最大误差 |w - 读回值|（Q8_0、Q4_0、Q4_1，Q4_K 取 256 个）。"
                  "位数越少，台阶越粗。",
        "x": "一行输入 x，与作为单行权重 W 的 Q4_1 块相乘。",
        "y": "直接从块计算 y = x W^T：乘法每次只把 W 的一段行展开到临时内存，从不展开整个矩阵"
             "（ops/quant/product.py）；装了 numba 时，解码一步的少数几行改走编译版本，完全不展开 W："
             "对 Q8_0、Q4_0、Q4_1，每个块贡献 d * sum(code * x)，再加上 m（或 -8d）乘以该块 x 的和，"
             "一次处理 W 的四行（kernels/quant_numba.py）；预填充的大量行仍按段展开后交给 BLAS，"
             "只是每段的展开改成一趟编译循环（kernels/quant_slabs.py）。",
        "dx": "这些块没有梯度（取整没有导数）。y = x W^T 在 W 量化时的反向：这些块是冻结的（没有 dW：LoRA 在旁边训练 float32 的"
              "适配器），dx = G W 读的仍是同样的块，每次一段行（ops/quant/product.py）。",
    },
})


def _inputs(options: dict, rng) -> Setup:
    weights = normal(rng, (q4_k.BLOCK,), std=WEIGHT_STD)            # (256,): one Q4_K block
    x = normal(rng, (1, q8_0.BLOCK))                                 # (1, 32): one input row
    return Setup({"w": weights, "x": x}, Pair(_forward, _backward), {}, checked=("x",))


def _forward(inputs: dict):
    """Every format's block of the weights (ctx), and y = x W^T (1, 1) with W the Q4_1 block as
    a one-row quantized weight, multiplied from its blocks (ops/quant/matrix.py)."""
    w = np.asarray(inputs["w"], np.float32)
    row = w[None, :q8_0.BLOCK]                                       # (1, 32): one block
    ctx = {"q8_0": q8_0.quantize(row), "q4_0": q4_0.quantize(row),
           "q4_1": q4_1.quantize(row), "q4_k": q4_k.quantize(w[None])}   # (1, BYTES) each
    weight = QuantizedMatrix("q4_1", ctx["q4_1"], q8_0.BLOCK, transposed=True)   # W^T (32, 1)
    ctx["weight"] = weight
    return inputs["x"] @ weight, ctx                                 # (1, 32) @ (32, 1) -> (1, 1)


def _backward(dout, ctx):
    """dx = G W from the same blocks; the blocks themselves take no gradient."""
    return {"x": dout @ ctx["weight"].T}                             # (1, 1) @ (1, 32) -> (1, 32)


def _half(block: np.ndarray, at: int) -> float:
    return float(block[0, at:at + 2].view(np.float16)[0])


def _steps(inputs, out, ctx, static):
    w = inputs["w"].astype(np.float32)
    block = w[:q8_0.BLOCK]
    b8, b40, b41, bk = ctx["q8_0"], ctx["q4_0"], ctx["q4_1"], ctx["q4_k"]
    back = {"q8_0": q8_0.dequantize(b8)[0], "q4_0": q4_0.dequantize(b40)[0],
            "q4_1": q4_1.dequantize(b41)[0], "q4_k": q4_k.dequantize(bk)[0]}
    sc, m = q4_k.scales_and_mins(bk[:, 4:16])
    errors = np.array([np.abs(back[k] - (w if k == "q4_k" else block)).max()
                       for k in ("q8_0", "q4_0", "q4_1", "q4_k")])
    return [
        step(TEXT, "w", block, f"w: {shape_of(block)}"),
        step(TEXT, "q8_0_d", _half(b8, 0), "d = max|w| / 127  (float16)"),
        step(TEXT, "q8_0_codes", b8[0, 2:].view(np.int8), "round(w / d): (32,) int8"),
        step(TEXT, "q8_0_back", back["q8_0"], "d * code: (32,)"),
        step(TEXT, "q4_0_d", _half(b40, 0), "d = w[argmax |w|] / -8  (float16)"),
        step(TEXT, "q4_0_codes", q4_0.nibbles(b40[:, 2:])[0], "trunc(w / d + 8.5): (32,) 0..15"),
        step(TEXT, "q4_0_bytes", b40[0], "d (2) | low nibble w_j, high nibble w_j+16 (16): (18,)"),
        step(TEXT, "q4_0_back", back["q4_0"], "d * (code - 8): (32,)"),
        step(TEXT, "q4_1_dm", np.array([_half(b41, 0), _half(b41, 2)]), "[d, m]  (float16)"),
        step(TEXT, "q4_1_codes", q4_0.nibbles(b41[:, 4:])[0], "trunc((w - m) / d + 0.5): (32,)"),
        step(TEXT, "q4_1_back", back["q4_1"], "d * code + m: (32,)"),
        step(TEXT, "k_w", block, "w[0:32] of (256,)"),
        step(TEXT, "k_scales", np.stack([sc[0], m[0]]), "[sc_0..7; m_0..7]: (2, 8) in 0..63"),
        step(TEXT, "k_dd", np.array([_half(bk, 0), _half(bk, 2)]), "[d, dmin]  (float16)"),
        step(TEXT, "k_codes", q4_k.codes_of(bk[:, 16:])[0, 0], "codes of sub-block 0: (32,)"),
        step(TEXT, "k_back", back["q4_k"][:q8_0.BLOCK], "(d sc_0) code - (dmin m_0): (32,)"),
        step(TEXT, "errors", errors, "max |w - read back|: Q8_0, Q4_0, Q4_1, Q4_K"),
        step(TEXT, "x", inputs["x"], f"x: {shape_of(inputs['x'])}"),
        step(TEXT, "y", out, "x @ W^T, W the Q4_1 block read slab by slab: (1, 1)"),
    ]


def _backward_steps(dout, grads, ctx, static):
    return [step(TEXT, "G", dout, shape_of(dout)),
            step(TEXT, "dx", grads["x"], "G @ W: (1, 32); no dW (frozen blocks)")]


QUANT = Part(name="quant", defaults={}, make_inputs=_inputs, forward_steps=_steps,
             backward_steps=_backward_steps, text=TEXT, verdict=False)
