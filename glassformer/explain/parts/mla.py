"""`explain mla`: DeepSeek's multi-head latent attention (blocks/mla.py) step by step, through
its gradcheck case (gradcheck/cases/mla.py), ending with what its generation cache costs.

Everything shown comes from one `mla_block_forward` call and its ctx:

    q_low, latent  the normalised low-rank query and the latent, as the norms' ctxs keep them
                   (x-hat times the scale), and what wq_b and wkv_b read
    k_pe           the rotated RoPE key, read off the attention op's keys: the same in every head
    heads          q and k (B, H, T, Dn+Dr) and v (B, H, S, Dv), the attention op's inputs
    scores         split into the no-RoPE part q_nope . k_nope and the RoPE part q_pe . k_pe
    weights        ctx.attn.softmax.probs (B, H, T, S)
    cache          floats per token and layer: MLA keeps R + Dr, MHA H (Dn+Dr) + H Dv,
                   GQA with K heads K (Dn+Dr) + K Dv

The params are inputs under the case's names ("attn.wkv_a"), so the check line names them so too.
"""
from __future__ import annotations

import numpy as np

from glassformer.blocks.config import BlockConfig, MLAConfig
from glassformer.blocks.kv_cache import KVLayout
from glassformer.blocks.mla import init_mla, mla_latent
from glassformer.blocks.names import prefixed
from glassformer.errors import GlassformerError
from glassformer.explain.core import Part, Setup, lively, normal, shape_of, step, with_common
from glassformer.explain.parts.attention_block import param_grad_step
from glassformer.gradcheck.cases import mla as mla_cases

SIZES = {"batch": 1, "seq": 4, "d_model": 8, "heads": 4, "kv_heads": None}
PREFIX = "attn."
# R, Rq, Dn, Dr, Dv: small enough to read every number
WIDTHS = dict(kv_lora_rank=4, q_lora_rank=6, qk_nope_head_dim=2, qk_rope_head_dim=2,
              v_head_dim=2)
PARAM_ORDER = ("wq_a", "q_norm.w", "wq_b", "wkv_a", "kv_norm.w", "wkv_b", "wo")
# DeepSeek-V3's own widths (its config.json), for the cache comparison at full size
DEEPSEEK_V3 = dict(heads=128, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64,
                   v_head_dim=128, layers=61)

TEXT = with_common({
    "en": {
        "title": "Multi-head latent attention, DeepSeek-V3 (blocks/mla.py)",
        "x": "Input x (B, T, C): one row per token.",
        "wq_a": "wq_a (C, Rq): the queries' down-projection to a low rank Rq.",
        "q_norm.w": "q_norm scale (Rq,): RMSNorm on the low-rank query.",
        "wq_b": "wq_b (Rq, H*(Dn+Dr)): up to every head's query, a no-RoPE part Dn and a RoPE "
                "part Dr.",
        "wkv_a": "wkv_a (C, R+Dr): one product gives the latent (R) and the RoPE key (Dr) of a "
                 "token, for all heads at once.",
        "kv_norm.w": "kv_norm scale (R,): RMSNorm on the latent.",
        "wkv_b": "wkv_b (R, H*(Dn+Dv)): from the latent up to every head's key (no-RoPE part) "
                 "and value.",
        "wo": "wo (H*Dv, C): mixes the heads' results back into width C.",
        "q_low": "Low-rank query: RMSNorm(x @ wq_a), what wq_b reads.",
        "latent": "The latent c = RMSNorm(first R columns of x @ wkv_a): {r} numbers per token. "
                  "This, and the RoPE key, is all a generation cache keeps.",
        "k_pe": "The decoupled RoPE key: the last Dr columns of x @ wkv_a, turned by RoPE. One "
                "vector per token, shared by all H heads (every head's key ends with it).",
        "q_heads": "Queries per head: [q_nope (Dn) | q_pe (Dr)]; q_pe is turned by RoPE, each "
                   "head its own.",
        "k_heads": "Keys per head: [k_nope_h (Dn), made from the latent by wkv_b | k_pe (Dr), "
                   "the same for every head].",
        "v_heads": "Values per head, made from the latent by wkv_b.",
        "scale": "Softmax scale 1/sqrt(Dn + Dr) (times mscale^2 under DeepSeek's YaRN RoPE).",
        "scores_nope": "Score part without position: q_nope . k_nope, per head.",
        "scores_rope": "Score part with position: q_pe . k_pe. Why decoupled: RoPE turns a key "
                       "by its position, so a key made from the latent and then turned could not "
                       "be folded into the query's weights; position lives only in this narrow "
                       "part.",
        "scores": "Scores = (no-RoPE part + RoPE part) * scale, (T, S) per head.",
        "weights": "Weights per head: causal softmax of each row.",
        "merged": "Heads' outputs side by side: weights @ v, (B, H, T, Dv) -> (B, T, H*Dv).",
        "y": "Output y = merged @ wo: width C again.",
        "cache": "Cache floats per token and layer: [MLA, MHA, GQA] = [R + Dr, H(Dn+Dr) + H Dv, "
                 "K(Dn+Dr) + K Dv], the same heads and widths. Here MLA keeps {ratio_mha:.1f}x "
                 "less than MHA and {ratio_gqa:.1f}x less than GQA with K = {k}.",
        "cache_v3": "The same at DeepSeek-V3's size (H=128, R=512, Dn=128, Dr=64, Dv=128, 61 "
                    "layers, bf16): bytes per token over all layers [MLA, MHA, GQA K=8]. MLA "
                    "keeps {ratio_mha:.0f}x less than MHA, {ratio_gqa:.1f}x less than GQA-8.",
        "dx": "dL/dx: x fed two paths, the queries and the latent with the RoPE key, so two "
              "gradients add up. Inside, the RoPE key's gradient is the sum over the H heads "
              "that shared it, and wkv_b's output gradient joins dk_nope and dv side by side.",
    },
    "zh": {
        "title": "多头潜在注意力 MLA，DeepSeek-V3（blocks/mla.py）",
        "x": "输入 x (B, T, C)：每个 token 一行。",
        "wq_a": "wq_a (C, Rq)：查询先降到低秩 Rq。",
        "q_norm.w": "q_norm 缩放 (Rq,)：对低秩查询做 RMSNorm。",
        "wq_b": "wq_b (Rq, H*(Dn+Dr))：再升回每个头的查询，分为不带 RoPE 的 Dn 部分和带 RoPE 的 "
                "Dr 部分。",
        "wkv_a": "wkv_a (C, R+Dr)：一次乘法得到一个 token 的潜向量（R 维）和 RoPE 键（Dr 维），"
                 "所有头共用。",
        "kv_norm.w": "kv_norm 缩放 (R,)：对潜向量做 RMSNorm。",
        "wkv_b": "wkv_b (R, H*(Dn+Dv))：从潜向量升回每个头的键（不带 RoPE 的部分）和值。",
        "wo": "wo (H*Dv, C)：把各个头的结果混合回宽度 C。",
        "q_low": "低秩查询：RMSNorm(x @ wq_a)，也就是 wq_b 读到的输入。",
        "latent": "潜向量 c = RMSNorm(x @ wkv_a 的前 R 列)：每个 token 只有 {r} 个数。生成时的缓存"
                  "只保存它和 RoPE 键。",
        "k_pe": "解耦的 RoPE 键：x @ wkv_a 的后 Dr 列，经 RoPE 旋转。每个 token 一个向量，H 个头"
                "共用（每个头的键都以它结尾）。",
        "q_heads": "每个头的查询：[q_nope (Dn) | q_pe (Dr)]；q_pe 经 RoPE 旋转，每个头各有一份。",
        "k_heads": "每个头的键：[k_nope_h (Dn)，由 wkv_b 从潜向量得到 | k_pe (Dr)，所有头相同]。",
        "v_heads": "每个头的值，由 wkv_b 从潜向量得到。",
        "scale": "softmax 缩放因子 1/sqrt(Dn + Dr)（DeepSeek 的 YaRN RoPE 下再乘 mscale^2）。",
        "scores_nope": "不含位置的分数部分：q_nope . k_nope，每个头一份。",
        "scores_rope": "含位置的分数部分：q_pe . k_pe。为什么要解耦：RoPE 按位置旋转键，若键由潜向量"
                       "生成后再旋转，就无法把 wkv_b 吸收进查询的权重；于是位置信息只放在这条窄的"
                       "通道里。",
        "scores": "分数 = (不含位置部分 + 含位置部分) * scale，每个头 (T, S)。",
        "weights": "每个头的权重：对每一行做因果 softmax。",
        "merged": "各头输出并排：weights @ v，(B, H, T, Dv) -> (B, T, H*Dv)。",
        "y": "输出 y = merged @ wo：重新回到宽度 C。",
        "cache": "每个 token、每层缓存的浮点数：[MLA, MHA, GQA] = [R + Dr, H(Dn+Dr) + H Dv, "
                 "K(Dn+Dr) + K Dv]，头数和宽度相同。这里 MLA 比 MHA 少 {ratio_mha:.1f} 倍，"
                 "比 K = {k} 的 GQA 少 {ratio_gqa:.1f} 倍。",
        "cache_v3": "换成 DeepSeek-V3 的尺寸（H=128, R=512, Dn=128, Dr=64, Dv=128, 61 层, bf16）："
                    "每个 token 在所有层上的缓存字节数 [MLA, MHA, GQA K=8]。MLA 比 MHA 少 "
                    "{ratio_mha:.0f} 倍，比 GQA-8 少 {ratio_gqa:.1f} 倍。",
        "dx": "dL/dx：x 走了两条路，查询路径和潜向量加 RoPE 键的路径，所以两份梯度相加。内部，"
              "RoPE 键的梯度是共用它的 H 个头的梯度之和；wkv_b 输出的梯度由 dk_nope 和 dv 并排拼成。",
    },
})


def cache_floats(*, heads: int, kv_heads: int, kv_lora_rank: int, qk_nope_head_dim: int,
                 qk_rope_head_dim: int, v_head_dim: int) -> np.ndarray:
    """Floats cached per token and layer: [MLA, MHA, GQA with kv_heads], same head widths
    (each the KVLayout such a cache would have: blocks/kv_cache.py)."""
    key, value = qk_nope_head_dim + qk_rope_head_dim, v_head_dim
    layouts = [KVLayout(heads=1, key_dim=kv_lora_rank, value_dim=qk_rope_head_dim),   # MLA
               KVLayout(heads=heads, key_dim=key, value_dim=value),
               KVLayout(heads=kv_heads, key_dim=key, value_dim=value)]
    return np.array([layout.floats_per_token() for layout in layouts], dtype=np.int64)


def mla_part_config(options: dict) -> BlockConfig:
    """The block for the sizes given, with WIDTHS' latent and head widths."""
    heads = options["heads"]
    if options["kv_heads"] is not None and heads % options["kv_heads"]:
        raise GlassformerError(f"--kv-heads {options['kv_heads']} must divide --heads {heads} "
                               "(the GQA the cache is compared with)")
    mla = MLAConfig(**WIDTHS)
    return BlockConfig(d_model=options["d_model"], n_head=heads, head_dim=mla.qk_rope_head_dim,
                       norm="rms", position="rope", mla=mla)


def _inputs(options: dict, rng) -> Setup:
    cfg = mla_part_config(options)
    b, t, c = options["batch"], options["seq"], cfg.d_model
    std = 1.0 / float(np.sqrt(c))    # scores O(1): weights neither uniform nor one-hot
    params = lively(init_mla(cfg, rng, std=std, out_std=std), rng, std=std)
    inputs = {"x": normal(rng, (b, t, c)), **prefixed(params, PREFIX)}
    case = mla_cases.case("explain", cfg)
    kv_heads = options["kv_heads"] or max(1, cfg.n_head // 2)
    return Setup(inputs, case, {"cfg": cfg, "params": params, "kv_heads": kv_heads})


def _normalised(norm_ctx) -> np.ndarray:
    """What an RMSNorm returned, read off its ctx: x-hat times the scale."""
    return norm_ctx.xhat * norm_ctx.w


def _cache_steps(cfg: BlockConfig, kv_heads: int) -> list:
    mla = cfg.mla
    here = cache_floats(heads=cfg.n_head, kv_heads=kv_heads, kv_lora_rank=mla.kv_lora_rank,
                        qk_nope_head_dim=mla.qk_nope_head_dim,
                        qk_rope_head_dim=mla.qk_rope_head_dim, v_head_dim=mla.v_head_dim)
    full = DEEPSEEK_V3
    v3 = cache_floats(heads=full["heads"], kv_heads=8, kv_lora_rank=full["kv_lora_rank"],
                      qk_nope_head_dim=full["qk_nope_head_dim"],
                      qk_rope_head_dim=full["qk_rope_head_dim"],
                      v_head_dim=full["v_head_dim"]) * (2 * full["layers"])    # bf16, 61 layers
    return [
        step(TEXT, "cache", here, f"[R+Dr, H(Dn+Dr)+H Dv, K(Dn+Dr)+K Dv] with H={cfg.n_head}, "
                                  f"K={kv_heads}", ratio_mha=here[1] / here[0],
             ratio_gqa=here[2] / here[0], k=kv_heads),
        step(TEXT, "cache_v3", v3, "floats x 2 bytes x 61 layers", ratio_mha=v3[1] / v3[0],
             ratio_gqa=v3[2] / v3[0]),
    ]


def _steps(inputs, y, ctx, static):
    cfg, params = static["cfg"], static["params"]
    dn = cfg.mla.qk_nope_head_dim
    attn = ctx.attn
    q, k, v = attn.q, attn.k, attn.v                  # (B, H, T, Dn+Dr), (B, H, S, ...), Dv
    scores_nope = q[..., :dn] @ np.swapaxes(k[..., :dn], -1, -2)      # (B, H, T, S)
    scores_rope = q[..., dn:] @ np.swapaxes(k[..., dn:], -1, -2)      # (B, H, T, S)
    scores = (scores_nope + scores_rope) * attn.scale
    merged = ctx.out_proj.x                                           # (B, T, H*Dv)
    steps = [step(TEXT, "x", inputs["x"], shape_of(inputs["x"]))]
    steps += [step(TEXT, name, params[name], shape_of(params[name]), show="line")
              for name in PARAM_ORDER]
    latent = mla_latent(ctx)
    steps += [
        step(TEXT, "q_low", _normalised(ctx.q_norm), f"RMSNorm(x @ wq_a): "
                                                     f"{shape_of(ctx.q_b.x)}"),
        step(TEXT, "latent", latent, f"RMSNorm((x @ wkv_a)[..., :R]): {shape_of(latent)}",
             r=cfg.mla.kv_lora_rank),
        step(TEXT, "k_pe", k[:, 0, :, dn:], f"RoPE((x @ wkv_a)[..., R:]): "
                                            f"{shape_of(k[:, 0, :, dn:])}"),
        step(TEXT, "q_heads", q, f"split heads, RoPE on the last Dr: {shape_of(q)}"),
        step(TEXT, "k_heads", k, f"[latent @ wkv_b (k part) | k_pe broadcast]: {shape_of(k)}"),
        step(TEXT, "v_heads", v, f"latent @ wkv_b (v part): {shape_of(v)}"),
        step(TEXT, "scale", attn.scale, f"1/sqrt(Dn+Dr = {dn}+{cfg.mla.qk_rope_head_dim})"),
        step(TEXT, "scores_nope", scores_nope, f"q[..., :Dn] @ k[..., :Dn]^T: "
                                               f"{shape_of(scores_nope)}"),
        step(TEXT, "scores_rope", scores_rope, f"q[..., Dn:] @ k_pe^T: {shape_of(scores_rope)}"),
        step(TEXT, "scores", scores, "(nope + rope) * scale"),
        step(TEXT, "weights", attn.softmax.probs, f"causal softmax over S: "
                                                  f"{shape_of(attn.softmax.probs)}",
             show="heads"),
        step(TEXT, "merged", merged, f"weights @ v, merged: {shape_of(merged)}"),
        step(TEXT, "y", y, f"merged @ wo: {shape_of(merged)} -> {shape_of(y)}"),
    ]
    return steps + _cache_steps(cfg, static["kv_heads"])


def _backward_steps(dout, grads, ctx, static):
    steps = [step(TEXT, "G", dout, shape_of(dout))]
    steps += [param_grad_step(name, grads[PREFIX + name], key="d" + name, param=name)
              for name in reversed(PARAM_ORDER)]
    steps.append(step(TEXT, "dx", grads["x"], f"query path + latent path: "
                                              f"{shape_of(grads['x'])}"))
    return steps


MLA = Part(name="mla", defaults=dict(SIZES), make_inputs=_inputs, forward_steps=_steps,
           backward_steps=_backward_steps, text=TEXT)
