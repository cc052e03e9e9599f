"""`explain cross_attention`: the encoder-decoder's third kind of attention (blocks/attention.py
with `memory`), step by step, through the attention block's gradcheck case in its cross mode.

Queries come from the decoder (one row per output token), keys and values from the encoder's
output `memory` (one row per source token), so the weights are a (T, S) table: which source
tokens each output token reads. No causal mask (the whole source is known before decoding
starts); only the source padding is masked:

    source:        le   chat  noir  </s>  <pad>
    output 0  ->   ..   ..    ..    ..    (masked)
    output 1  ->   ..   ..    ..    ..    (masked)

Backward: memory fed both the key and the value projection, so dmemory is their sum; in a whole
model every decoder layer reads the same memory, and models/seq2seq.py sums the layers' dmemory
on one line.

With --ckpt RUN --prompt TEXT the block is the last decoder layer's cross-attention of a trained
encoder-decoder (a `glassformer train --arch transformer` run): the source is the prompt's
tokens, the outputs are the model's greedy translation, and x and memory are what that layer
read in a forward over them (its ctx). No finite-difference check then (too many weights).
"""
from __future__ import annotations

import numpy as np

from glassformer.blocks.attention import attention_inputs, init_attention, merged_heads
from glassformer.blocks.config import BlockConfig
from glassformer.blocks.names import prefixed, sub_params
from glassformer.blocks.residual import attention_block_ctx
from glassformer.errors import GlassformerError
from glassformer.explain.core import Part, Setup, lively, normal, shape_of, step, with_common
from glassformer.explain.parts.attention_block import (attention_grad_steps, head_arrays,
                                                   projections)
from glassformer.generate.beam import greedy_search
from glassformer.gradcheck.cases import attention_block
from glassformer.io.pretrained import load_pretrained
from glassformer.models import seq2seq
from glassformer.models.family import ENCODER_DECODER

# None: not given (the random block then uses TINY's size; a loaded model refuses sizes)
DEFAULTS = {"batch": None, "seq": None, "d_model": None, "heads": None, "ckpt": None,
            "prompt": None}
TINY = {"batch": 1, "seq": 3, "d_model": 8, "heads": 2}
# A toy source sentence, its last slot padding so the mask shows; the output tokens are named
# by position (the weights are a random block's, not a translation model's).
SOURCE = ("le", "chat", "noir", "</s>", "<pad>")
PREFIX = "cross."
TEXT = with_common({
    "en": {
        "title": "Cross-attention (blocks/attention.py with memory)",
        "source": "The source tokens the encoder read (S = {s}); the last is padding.",
        "source_loaded": "The prompt's tokens, read by the encoder (S = {s}). The outputs below "
                         "are the model's greedy translation: {outputs}. Shown: decoder layer "
                         "{layer}, the last one.",
        "x": "Decoder states x (B, T, C): one row per output token so far. They ask the "
             "questions (queries).",
        "memory": "Encoder output memory (B, S, C): one row per source token. It answers (keys "
                  "and values). The encoder ran once; every decoder layer reads the same memory.",
        "mask": "Source mask (B, S): True for real source tokens. Padding is never read. There "
                "is no causal mask: the whole source is known before the first output token.",
        "q": "Queries from the decoder: x @ wq + bq, (B, T, H*D).",
        "k": "Keys from the source: memory @ wk + bk, (B, S, H*D).",
        "v": "Values from the source: memory @ wv + bv, (B, S, H*D).",
        "weights": "Weights per head, (T, S): row t says how much output token t reads each "
                   "source token. Each row sums to 1 over the real source tokens; the padding "
                   "column is blank.",
        "reads": "Which source token each output token reads most (weights averaged over the "
                 "heads). In a trained translation model this is close to a word alignment.",
        "merged": "Heads side by side again: weights @ v per head, merged to (B, T, H*D).",
        "y": "Output y = merged @ wo + bo, (B, T, C): what the source adds to each output "
             "token's residual stream.",
        "dbk": "dL/d{param} is exactly 0. The key bias adds one fixed vector to every key, which "
               "adds the same number to a whole row of scores, and softmax ignores a constant "
               "added to a row.",
        "dx": "dL/dx: the decoder states fed only the query projection.",
        "dmemory": "dL/dmemory: memory fed two projections (keys and values), so two gradients "
                   "add up. The padding row gets none. In the whole model each decoder layer "
                   "adds its own dmemory: models/seq2seq.py sums them on one line.",
    },
    "zh": {
        "title": "交叉注意力（blocks/attention.py，带 memory）",
        "source": "编码器读入的源语言 token（S = {s}）；最后一个是填充。",
        "source_loaded": "提示文本的 token，由编码器读入（S = {s}）。下面的输出是模型的贪心翻译："
                         "{outputs}。这里展示的是最后一个解码器层（第 {layer} 层）。",
        "x": "解码器状态 x (B, T, C)：到目前为止每个输出 token 一行。由它提问（查询）。",
        "memory": "编码器输出 memory (B, S, C)：每个源 token 一行。由它作答（键和值）。"
                  "编码器只运行一次，解码器的每一层都读取同一个 memory。",
        "mask": "源掩码 (B, S)：真实源 token 为 True，填充永远不被读取。这里没有因果掩码："
                "在生成第一个输出 token 之前，整个源句就已经已知。",
        "q": "来自解码器的查询：x @ wq + bq，(B, T, H*D)。",
        "k": "来自源句的键：memory @ wk + bk，(B, S, H*D)。",
        "v": "来自源句的值：memory @ wv + bv，(B, S, H*D)。",
        "weights": "每个头的权重 (T, S)：第 t 行表示输出 token t 从每个源 token 读取多少。"
                   "每行在真实源 token 上求和为 1；填充那一列是空白。",
        "reads": "每个输出 token 读得最多的源 token（各头权重取平均）。在训练好的翻译模型里，"
                 "这接近词对齐。",
        "merged": "把各个头重新并排：每个头 weights @ v，合并为 (B, T, H*D)。",
        "y": "输出 y = merged @ wo + bo，(B, T, C)：源句给每个输出 token 的残差流加上的内容。",
        "dbk": "dL/d{param} 恰好为 0。键偏置给每个键加上同一个向量，相当于给一整行分数加上"
               "同一个数，而 softmax 对整行加常数不敏感。",
        "dx": "dL/dx：解码器状态只进入了查询投影。",
        "dmemory": "dL/dmemory：memory 进入了两个投影（键和值），所以两条路径的梯度相加。"
                   "填充那一行没有梯度。在整个模型里，每个解码器层都加上自己的 dmemory："
                   "models/seq2seq.py 在一行里把它们相加。",
    },
})


def _inputs(options: dict, rng) -> Setup:
    if options["ckpt"] is not None:
        return _loaded_inputs(options)
    if options["prompt"] is not None:
        raise GlassformerError("--prompt applies with --ckpt (a trained encoder-decoder)")
    sizes = {name: TINY[name] if options[name] is None else options[name] for name in TINY}
    b, t, c, h = sizes["batch"], sizes["seq"], sizes["d_model"], sizes["heads"]
    if c % h:
        raise GlassformerError(f"--heads {h} must divide --d-model {c}")
    cfg = BlockConfig(d_model=c, n_head=h, norm_position="post", mlp="relu")
    s = len(SOURCE)
    # 1/sqrt(C)-sized projections keep the scores O(1): weights neither uniform nor one-hot
    std = 1.0 / float(np.sqrt(c))
    params = lively(init_attention(cfg, rng, std=std, out_std=std), rng, std=std)
    mask = np.ones((b, s), dtype=bool)                                  # (B, S)
    mask[:, -1] = False                                                 # the <pad> slot
    inputs = {"x": normal(rng, (b, t, c)), "memory": normal(rng, (b, s, c)), "key_mask": mask,
              **prefixed(params, PREFIX)}
    case = attention_block.case("explain", cfg, causal=False, cross=True, with_key_bias=True)
    outputs = [f"out{i}" for i in range(t)]
    return Setup(inputs, case, {"cfg": cfg, "params": params, "source": list(SOURCE),
                                "outputs": outputs, "layer": None})


def _loaded_inputs(options: dict) -> Setup:
    """The last decoder layer's cross-attention of a trained model, over the prompt and the
    model's greedy output (see the module docstring)."""
    if any(options[name] is not None for name in TINY):
        raise GlassformerError("--batch, --seq, --d-model and --heads do not apply with --ckpt: "
                               "the loaded model and the prompt set them")
    if options["prompt"] is None:
        raise GlassformerError("explain cross_attention --ckpt needs --prompt, the source text")
    model = load_pretrained(options["ckpt"])
    tokenizer = model.tokenizer
    if model.family.kind != ENCODER_DECODER:
        raise GlassformerError(f"explain cross_attention --ckpt needs an encoder-decoder "
                               f"(arch transformer), got {model.arch}")
    if tokenizer is None or not hasattr(tokenizer, "id_to_piece"):
        raise GlassformerError(f"{options['ckpt']} has no pair tokenizer to encode --prompt with")
    cfg, params = model.cfg, model.params
    src = np.array([tokenizer.encode(options["prompt"])], dtype=np.int64)     # (1, S)
    if not 1 <= src.shape[1] <= cfg.max_seq_len:
        raise GlassformerError(f"--prompt must encode to 1 .. {cfg.max_seq_len} tokens, got "
                               f"{src.shape[1]}")
    out = greedy_search(params, cfg, src, max_new_tokens=cfg.max_seq_len)[0].tolist()
    out = out[:out.index(cfg.eos_id) + 1] if cfg.eos_id in out else out      # keep its </s>
    tgt_in = np.array([[cfg.decoder_start_id] + out[:-1]], dtype=np.int64)  # (1, T)
    _, ctx = seq2seq.forward(params, (src, tgt_in), cfg)
    layer = cfg.decoder_layers - 1
    # what that layer's cross-attention read: the decoder states and the encoder output
    x, memory = attention_inputs(attention_block_ctx(ctx.decoder.blocks[layer], cross=True))
    block_params = sub_params(params, f"dec.blocks.{layer}.cross.")
    inputs = {"x": x, "memory": memory, "key_mask": src != -1,
              **prefixed(block_params, PREFIX)}
    bcfg = cfg.block_config("dec")   # the decoder's heads (a distilled model has its own)
    case = attention_block.case("explain", bcfg, causal=False, cross=True, with_key_bias=True)
    static = {"cfg": bcfg, "params": block_params, "layer": layer,
              "source": [tokenizer.id_to_piece(int(i)) for i in src[0]],
              "outputs": [tokenizer.id_to_piece(int(i)) for i in out]}
    return Setup(inputs, case, static, checked=())


def _reads(weights: np.ndarray, source: list[str], outputs: list[str]) -> list[str]:
    """'output token -> source token (mean weight)' for batch item 0: weights (B, H, T, S)."""
    mean = weights[0].mean(axis=0)                                      # (H, T, S) -> (T, S)
    best = mean.argmax(axis=1)                                          # (T,)
    return [f"{outputs[t]}->{source[j]}({mean[t, j]:.2f})" for t, j in enumerate(best)]


def _steps(inputs, y, ctx, static):
    cfg, params = static["cfg"], static["params"]
    x, memory, mask = inputs["x"], inputs["memory"], inputs["key_mask"]
    proj = projections(ctx, params)
    weights = head_arrays(ctx, cfg.n_head)["weights"]                   # (B, H, T, S)
    merged = merged_heads(ctx)                                          # (B, T, H*D)
    source, outputs = static["source"], static["outputs"]
    if static["layer"] is None:
        first = step(TEXT, "source", source, f"S = {len(source)}", show="tokens", s=len(source))
    else:
        first = step(TEXT, "source", source, f"S = {len(source)}", text="source_loaded",
                     show="tokens", s=len(source), outputs=" ".join(outputs),
                     layer=static["layer"])
    wide = "full" if static["layer"] is None else "line"   # a trained model's C is too wide
    return [
        first,
        step(TEXT, "x", x, shape_of(x), show=wide),
        step(TEXT, "memory", memory, shape_of(memory), show=wide),
        step(TEXT, "mask", mask, shape_of(mask)),
        step(TEXT, "q", proj["q"], f"x @ wq + bq: {shape_of(x)} -> {shape_of(proj['q'])}",
             show=wide),
        step(TEXT, "k", proj["k"], f"memory @ wk + bk: {shape_of(memory)} -> "
                                   f"{shape_of(proj['k'])}", show=wide),
        step(TEXT, "v", proj["v"], f"memory @ wv + bv: {shape_of(memory)} -> "
                                   f"{shape_of(proj['v'])}", show=wide),
        step(TEXT, "weights", weights, f"softmax over S of q k^T / sqrt(D), padding masked: "
                                       f"{shape_of(weights)}", show="heads"),
        step(TEXT, "reads", _reads(weights, source, outputs), "argmax over S of mean over H",
             show="tokens"),
        step(TEXT, "merged", merged, f"weights @ v, merged: {shape_of(merged)}", show=wide),
        step(TEXT, "y", y, f"merged @ wo + bo: {shape_of(merged)} -> {shape_of(y)}", show=wide),
    ]


def _backward_steps(dout, grads, ctx, static):
    steps = [step(TEXT, "G", dout, shape_of(dout))]
    # note: the parameter lines use the mha part's texts (the same words)
    steps += attention_grad_steps(grads, PREFIX)
    steps.append(step(TEXT, "dx", grads["x"], f"dq wq^T: {shape_of(grads['x'])}"))
    steps.append(step(TEXT, "dmemory", grads["memory"], f"dk wk^T + dv wv^T: "
                                                        f"{shape_of(grads['memory'])}"))
    return steps


CROSS_ATTENTION = Part(name="cross_attention", defaults=dict(DEFAULTS), make_inputs=_inputs,
                       forward_steps=_steps, backward_steps=_backward_steps, text=TEXT)
