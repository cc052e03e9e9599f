"""Block-quantized weights in GGUF's formats, by hand (`glassformer explain quant`).

    formats.py   the table of formats: name, GGML type id, block and byte sizes
    q8_0.py q4_0.py q4_1.py q4_k.py   one format each: dequantize / quantize many blocks at once
    q5_0.py      llama.cpp's fallback for Q4_K rows that are not a multiple of 256
    product.py   x @ W^T and dy @ W reading the blocks a slab of rows at a time
    matrix.py    QuantizedMatrix: the record a quantized weight is kept in (kind, shape, blocks)

Each format's dequantize equals `gguf.quants.dequantize` bit for bit (tests/ops/quant/).
"""
from glassformer.ops.quant.formats import FORMATS, TYPE_IDS, format_of
from glassformer.ops.quant.matrix import (QuantizedMatrix, as_array, is_quantized, quantize_matrix,
                                          quantize_weight)

__all__ = ["FORMATS", "TYPE_IDS", "QuantizedMatrix", "as_array", "format_of", "is_quantized",
           "quantize_matrix", "quantize_weight"]
