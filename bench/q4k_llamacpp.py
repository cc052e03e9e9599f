"""ops/quant/q4_k.py's quantize against llama.cpp's (llama-cpp-python's llama_model_quantize, pure
Q4_K, no importance matrix) on the same float32 tensors of a tiny random LLaMA GGUF file: how many
super-blocks and codes differ, and the RMS error of each. Needs llama-cpp-python (a benchmark
dependency).

    python bench/q4k_llamacpp.py

Last line: one JSON object.
"""
from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "io"))
from test_gguf_quantize import CFG, write_source  # noqa: E402  (a tiny LLaMA as GGUF)


def main() -> None:
    import gguf
    import llama_cpp

    from glassformer.models.llama import init_params
    from glassformer.ops.quant import q4_k

    with tempfile.TemporaryDirectory() as tmp:
        source, target = Path(tmp) / "f32.gguf", Path(tmp) / "q4_k.gguf"
        write_source(source, init_params(CFG, np.random.default_rng(0)))
        params = llama_cpp.llama_model_quantize_default_params()
        params.ftype, params.pure, params.nthread = llama_cpp.LLAMA_FTYPE_MOSTLY_Q4_K_S, True, 1
        assert llama_cpp.llama_model_quantize(str(source).encode(), str(target).encode(),
                                              params) == 0
        floats = {t.name: np.asarray(t.data, np.float32) for t in gguf.GGUFReader(source).tensors}
        stats = dict(blocks=0, blocks_differing=0, codes=0, codes_differing=0, sq_ours=0.0,
                     sq_llama_cpp=0.0, weights=0)
        for tensor in gguf.GGUFReader(target).tensors:
            if tensor.tensor_type.name != "Q4_K":
                continue
            x = floats[tensor.name].reshape(-1, q4_k.BLOCK)                  # (n, 256)
            ours, theirs = q4_k.quantize(x), np.asarray(tensor.data).reshape(-1, q4_k.BYTES)
            stats["blocks"] += len(x)
            stats["blocks_differing"] += int((ours != theirs).any(axis=1).sum())
            codes_ours, codes_theirs = q4_k.codes_of(ours[:, 16:]), q4_k.codes_of(theirs[:, 16:])
            stats["codes"] += codes_ours.size
            stats["codes_differing"] += int((codes_ours != codes_theirs).sum())
            stats["sq_ours"] += float(((q4_k.dequantize(ours) - x) ** 2).sum())
            stats["sq_llama_cpp"] += float(((q4_k.dequantize(theirs) - x) ** 2).sum())
            stats["weights"] += x.size
    rms_ours = (stats["sq_ours"] / stats["weights"]) ** 0.5
    rms_theirs = (stats["sq_llama_cpp"] / stats["weights"]) ** 0.5
    print(f"super-blocks differing {stats['blocks_differing']}/{stats['blocks']}, codes "
          f"differing {stats['codes_differing']}/{stats['codes']}; RMS error ours {rms_ours:.5g}, "
          f"llama.cpp {rms_theirs:.5g} (ratio {rms_ours / rms_theirs:.4f})")
    print(json.dumps({**stats, "rms_ours": rms_ours, "rms_llama_cpp": rms_theirs}))


if __name__ == "__main__":
    main()
