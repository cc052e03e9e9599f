"""Where glassformer's numbers part from llama.cpp's, layer by layer (issue 44's logit agreement).

llama.cpp's scheduler calls an eval callback (`cb_eval` in llama_context_params) on every node
of its graph once computed; the named ones (attn_norm-0, kqv_out-0, ffn_inp-0, ffn_out-0, l_out-0,
..., result_norm, result_output) are copied out here and set beside glassformer's hook points
(interpret/: run_with_cache) on the same token ids. Names that hold the same value:

    llama.cpp      glassformer (hook, TransformerLens's names)
    attn_norm-l    blocks.l.ln1.hook_normalized * the norm's weight
    kqv_out-l      blocks.l.attn.hook_z, heads merged (before the output projection)
    attn_out-l     blocks.l.hook_attn_out
    ffn_inp-l      blocks.l.hook_resid_mid
    ffn_norm-l     blocks.l.ln2.hook_normalized * the norm's weight
    ffn_swiglu-l   blocks.l.mlp.hook_post
    ffn_out-l      blocks.l.hook_mlp_out (what the MLP adds)
    l_out-l        blocks.l.hook_resid_post (llama.cpp names the sum "ffn_out" and then "l_out")
    result_norm    ln_final.hook_normalized * the final norm's weight
    result_output  the logits

For each point: the largest and mean |difference| and the relative error ||a - b|| / ||b||, so one
sees where the gap is born and how it grows.

--ops instead feeds each of layer 0's operations (and the LM head) llama.cpp's own input tensor
and compares the output with llama.cpp's: the 8-bit activation products (ops/quant/
activations_q8.py), the RMS norm, SwiGLU, the softmax. Equal to float32 rounding there (relative
error ~1e-7) means the arithmetic is llama.cpp's, op by op; what the chain still shows is the
8-bit rounding turning those ulps into different codes (bench/agreement.py).

    python bench/llamacpp_layers.py [--tokens 4] [--side float32|q8] [--layers 0,1,29] [--ops]

Last line: one JSON object {point: {max, mean, rel}} per position range.
A diagnostic only: llama-cpp-python is a benchmark dependency (never a test one).
"""
from __future__ import annotations

import argparse
import ctypes
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


class GGMLTensor(ctypes.Structure):
    """ggml.h's struct ggml_tensor, up to its name (GGML_MAX_DIMS 4, GGML_MAX_OP_PARAMS 64,
    GGML_MAX_SRC 10, GGML_MAX_NAME 64): the fields read here."""
    _fields_ = [("type", ctypes.c_int), ("buffer", ctypes.c_void_p),
                ("ne", ctypes.c_int64 * 4), ("nb", ctypes.c_size_t * 4), ("op", ctypes.c_int),
                ("op_params", ctypes.c_int32 * 16), ("flags", ctypes.c_int32),
                ("src", ctypes.c_void_p * 10), ("view_src", ctypes.c_void_p),
                ("view_offs", ctypes.c_size_t), ("data", ctypes.c_void_p),
                ("name", ctypes.c_char * 64)]


GGML_F32, GGML_F16 = 0, 1


def tensor_array(t: GGMLTensor) -> np.ndarray:
    """A float32 copy of a computed F32/F16 tensor (strides honoured), numpy order (ne3..ne0)."""
    dtype = np.float32 if t.type == GGML_F32 else np.float16
    item = np.dtype(dtype).itemsize
    ne = [int(n) for n in t.ne]
    nb = [int(n) for n in t.nb]
    span = sum((n - 1) * s for n, s in zip(ne, nb)) + item
    raw = np.ctypeslib.as_array((ctypes.c_uint8 * span).from_address(t.data))
    view = np.lib.stride_tricks.as_strided(raw.view(dtype) if nb[0] == item else raw,
                                           shape=ne[::-1], strides=nb[::-1])
    return np.array(view, dtype=np.float32)


def llamacpp_values(path: str, ids: list[int], wanted, threads: int, f32_cache: bool
                    ) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """{node name: value} of every node `wanted(name)` accepts, and the logits (T, V), of one
    llama.cpp decode of `ids` from an empty context (every position's logits)."""
    import llama_cpp as L
    L.llama_backend_init()
    mparams = L.llama_model_default_params()
    model = L.llama_model_load_from_file(path.encode(), mparams)
    values: dict[str, np.ndarray] = {}

    @L.ggml_backend_sched_eval_callback
    def callback(pointer, ask, _user):
        t = GGMLTensor.from_address(pointer)
        name = t.name.decode(errors="replace")
        if ask:
            return bool(wanted(name)) and t.type in (GGML_F32, GGML_F16)
        values[name] = tensor_array(t)
        return True

    cparams = L.llama_context_default_params()
    cparams.n_ctx = max(64, len(ids) + 8)
    cparams.n_batch = cparams.n_ubatch = max(32, len(ids))
    cparams.n_threads = cparams.n_threads_batch = threads
    cparams.flash_attn_type = L.LLAMA_FLASH_ATTN_TYPE_DISABLED
    cparams.cb_eval = callback
    if f32_cache:
        cparams.type_k = cparams.type_v = GGML_F32
    ctx = L.llama_init_from_model(model, cparams)
    batch = L.llama_batch_init(len(ids), 0, 1)
    for i, token in enumerate(ids):
        batch.token[i], batch.pos[i], batch.n_seq_id[i] = token, i, 1
        batch.seq_id[i][0], batch.logits[i] = 0, True
    batch.n_tokens = len(ids)
    if L.llama_decode(ctx, batch) != 0:
        raise SystemExit("llama_decode failed")
    vocab = L.llama_model_get_vocab(model)
    n_vocab = L.llama_vocab_n_tokens(vocab)
    logits = np.ctypeslib.as_array(L.llama_get_logits(ctx), shape=(len(ids) * n_vocab,))
    logits = logits.reshape(len(ids), n_vocab).copy()
    L.llama_batch_free(batch)
    L.llama_free(ctx)
    L.llama_model_free(model)
    return values, logits


def ours_values(path: str, ids: list[int], activations: str, layers: list[int]
                ) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """glassformer's values under llama.cpp's names, (T, ...) each, and its logits (T, V)."""
    from glassformer.interpret.cache import run_with_cache
    from glassformer.io.pretrained import load_pretrained
    model = load_pretrained(path, activations=activations)
    logits, cache = run_with_cache(model, np.array([ids]))
    p = model.params
    out = {"result_norm": cache["ln_final.hook_normalized"][0] * weight(p, "norm_f.w")}
    for l in layers:
        b = f"blocks.{l}."
        out[f"attn_norm-{l}"] = cache[b + "ln1.hook_normalized"][0] * weight(p, f"blocks.{l}.norm1.w")
        z = cache[b + "attn.hook_z"][0]
        out[f"kqv_out-{l}"] = z.reshape(z.shape[0], -1)
        out[f"attn_out-{l}"] = cache[b + "hook_attn_out"][0]
        out[f"ffn_inp-{l}"] = cache[b + "hook_resid_mid"][0]
        out[f"ffn_norm-{l}"] = cache[b + "ln2.hook_normalized"][0] * weight(p, f"blocks.{l}.norm2.w")
        out[f"ffn_swiglu-{l}"] = cache[b + "mlp.hook_post"][0]
        out[f"ffn_out-{l}"] = cache[b + "hook_mlp_out"][0]
        out[f"l_out-{l}"] = cache[b + "hook_resid_post"][0]
    return out, np.asarray(logits)[0]


def weight(params: dict, name: str) -> np.ndarray:
    """A norm's weight from the params (its name as models/llama.py keeps it)."""
    if name not in params:
        near = [k for k in params if k.endswith(name.split(".")[-1])][:5]
        raise SystemExit(f"no param {name}; some are {near}")
    return np.asarray(params[name], dtype=np.float32)


def gap(a: np.ndarray, b: np.ndarray) -> dict:
    """max, mean |a - b| and ||a - b|| / ||b|| (b: llama.cpp's)."""
    d = np.abs(a - b)
    rel = np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30)
    return {"max": figure(d.max()), "mean": figure(d.mean()), "rel": figure(rel)}


def figure(x) -> float:
    """x to 3 significant digits (ulp-sized gaps stay visible)."""
    return float(f"{float(x):.3g}")


def op_checks(path: str, ids: list[int], threads: int) -> dict:
    """Layer 0's operations and the LM head on llama.cpp's inputs, against llama.cpp's outputs."""
    from glassformer.io.pretrained import load_pretrained
    from glassformer.ops.quant.activations_q8 import activation_product
    got, _ = llamacpp_values(path, ids, lambda n: n.endswith("-0") or n.startswith("result"),
                             threads, False)
    t = {name: v.reshape(len(ids), -1) for name, v in got.items()
         if name not in ("kq-0", "kq_soft_max-0", "kqv-0")}
    p = load_pretrained(path, activations="q8").params

    def product(x, name):
        w = p[name]
        return activation_product(x, w.kind, w.blocks, w.cols)

    gate, up = t["ffn_gate-0"], t["ffn_up-0"]
    x = t["ffn_inp-0"]
    rms = x / np.sqrt((x * x).mean(-1, keepdims=True) + np.float32(1e-5))
    kq = got["kq-0"][0][:, :, : len(ids)] * np.float32(1 / 8)              # (H, T, T)
    kq[:, np.triu(np.ones((len(ids), len(ids)), bool), 1)] = -np.inf
    soft = np.exp(kq - kq.max(-1, keepdims=True))
    checks = {
        "Vcur = attn_norm @ wv (q8)": (product(t["attn_norm-0"], "blocks.0.attn.wv"),
                                       t["Vcur-0"]),
        "attn_out = kqv_out @ wo (q8)": (product(t["kqv_out-0"], "blocks.0.attn.wo"),
                                         t["attn_out-0"]),
        "ffn_norm = rms(ffn_inp) * w": (rms * weight(p, "blocks.0.norm2.w"), t["ffn_norm-0"]),
        "ffn_gate (q8)": (product(t["ffn_norm-0"], "blocks.0.mlp.w_gate"), gate),
        "ffn_up (q8)": (product(t["ffn_norm-0"], "blocks.0.mlp.w_up"), up),
        "ffn_swiglu = silu(gate) * up": (gate / (1 + np.exp(-gate)) * up, t["ffn_swiglu-0"]),
        "ffn_out = swiglu @ w_down (q8)": (product(t["ffn_swiglu-0"], "blocks.0.mlp.w_down"),
                                           t["ffn_out-0"]),
        "softmax(kq / 8), causal": (soft / soft.sum(-1, keepdims=True),
                                    got["kq_soft_max-0"][0][:, :, : len(ids)]),
        "logits = result_norm @ tok_emb^T (q8)": (product(t["result_norm"], "tok_emb"),
                                                  t["result_output"]),
    }
    report = {}
    for name, (a, b) in checks.items():
        report[name] = dict(gap(a, b), bit_equal=round(float(np.mean(a == b)), 3))
        print(f"{name:>38}: {report[name]}", flush=True)
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2")
    parser.add_argument("--tokens", type=int, default=4, help="held-out tokens fed at once")
    parser.add_argument("--side", default="float32", choices=("float32", "q8"))
    parser.add_argument("--layers", default="0,1,2,15,28,29")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--f32-cache", action="store_true", help="llama.cpp's KV cache in f32")
    parser.add_argument("--ops", action="store_true",
                        help="layer 0's operations on llama.cpp's own inputs instead")
    args = parser.parse_args()
    from bench.llamacpp import gguf_path, held_out_text
    from glassformer.tokenizers.load import load_tokenizer
    path = str(gguf_path(args))
    ids = load_tokenizer(path).encode(held_out_text()[: args.tokens * 8])[: args.tokens]
    if args.ops:
        print(json.dumps({"ids": ids, "ops": op_checks(path, ids, args.threads)}))
        return
    layers = [int(x) for x in args.layers.split(",")]
    ours, our_logits = ours_values(path, ids, args.side, layers)
    theirs, their_logits = llamacpp_values(path, ids, lambda n: n in ours, args.threads,
                                           args.f32_cache)
    report = {}
    for name in [*ours, "result_output"]:
        a = our_logits if name == "result_output" else ours[name]
        b = their_logits if name == "result_output" else theirs.get(name)
        if b is None:
            print(f"{name:>16}: not in llama.cpp's graph", flush=True)
            continue
        b = b.reshape(b.shape[-2] if b.ndim > 1 else 1, -1)[-a.shape[0]:]
        a = a.reshape(a.shape[0], -1)
        if a.shape != b.shape:
            print(f"{name:>16}: shapes {a.shape} vs {b.shape}", flush=True)
            continue
        report[name] = {"all": gap(a, b), "per_position_mean": [
            round(float(np.abs(a[i] - b[i]).mean()), 6) for i in range(a.shape[0])]}
        g = report[name]["all"]
        print(f"{name:>16}: max {g['max']:.5f} mean {g['mean']:.6f} rel {g['rel']:.2e}  "
              f"per position {report[name]['per_position_mean']}", flush=True)
    print(json.dumps({"ids": ids, "side": args.side, "points": report}))


if __name__ == "__main__":
    main()
