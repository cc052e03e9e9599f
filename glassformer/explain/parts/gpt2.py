"""`explain gpt2`: a whole GPT-2 forward over a short prompt, one line per step per layer, ending
with the next-token distribution; with --backward every parameter's gradient.

The model is `glassformer.models.gpt2` itself: a tiny random config over a small character
vocabulary, or a trained run loaded with --ckpt (load_pretrained, with its tokenizer). Everything
is read off the GPT2Ctx of one `forward` call, the ctx `backward` uses:

    tok, pos    embedding_forward on the ids the embedding ctxs saved
    x0          tok + pos, the model's one `+` before the first layer (dropout is the identity
                at inference and keeps nothing)
    layer i     parts/residual_block.layer_steps on ctx.blocks[i]
    norm_f      the input the LM head's LinearCtx saved (models/common.py: head_input)
    next token  softmax_forward of the last position's logits; top-5 by probability

No gradcheck case covers a whole model, so this part pairs gpt2.forward with gpt2.backward itself.
"""
from __future__ import annotations

import string
from functools import partial

import numpy as np

from glassformer.errors import GlassformerError
from glassformer.explain.core import Pair, Part, Setup, lively, shape_of, step, with_common
from glassformer.explain.parts.residual_block import layer_steps, param_grad_steps
from glassformer.io.pretrained import load_pretrained
from glassformer.models import gpt2
from glassformer.models.common import head_input
from glassformer.ops.embedding import embedding_forward
from glassformer.ops.softmax import softmax_forward
from glassformer.tokenizers.char import CharTokenizer

# The tiny model's vocabulary: lowercase letters, space and a little punctuation (V = 34).
TINY_ALPHABET = string.ascii_lowercase + " .,;!?'\n"
TINY_LAYERS = 2
TINY_CONTEXT = 16
TINY_SIZES = {"d_model": 8, "heads": 2}
DEFAULTS = {"d_model": None, "heads": None, "prompt": "hello", "ckpt": None}
TOP_K = 5
# Which gradients the finite-difference check covers on the tiny model. Every one of them would
# keep the command waiting (docs/performance.md); these cover both ends of the tied embedding, a
# position row, the first layer's attention, the last layer's MLP and the final norm.
CHECKED_TINY = ("tok_emb", "pos_emb", "blocks.0.norm1.w", "blocks.0.attn.wq",
                "blocks.{last}.mlp.w_down", "norm_f.w", "norm_f.b")

TEXT = with_common({
    "en": {
        "title": "GPT-2 model (models/gpt2.py)",
        "ids": "The prompt as token ids (B=1, T).",
        "tokens": "The text each id stands for.",
        "tok": "Token embeddings: row ids[t] of tok_emb for each position.",
        "pos": "Position embeddings: row t of pos_emb for position t (learned, GPT-2 style).",
        "x0": "Residual stream at the start: token + position embedding.",
        "norm_f": "Final LayerNorm over the last layer's output.",
        "logits": "Logits (B, T, V): a score for every vocabulary entry at every position; "
                  "position t predicts token t + 1.",
        "next_probs": "Softmax of the last position's logits: the distribution of the next "
                      "token.",
        "top5_tiny": "The five most likely next tokens. This tiny model has random weights, so "
                     "its guesses carry no meaning; --ckpt DIR loads a trained one.",
        "top5_loaded": "The five most likely next tokens according to the loaded model.",
    },
    "zh": {
        "title": "GPT-2 模型（models/gpt2.py）",
        "ids": "提示词对应的 token id (B=1, T)。",
        "tokens": "每个 id 代表的文本。",
        "tok": "词嵌入：每个位置取 tok_emb 的第 ids[t] 行。",
        "pos": "位置嵌入：位置 t 取 pos_emb 的第 t 行（可学习，GPT-2 的做法）。",
        "x0": "最开始的残差流：词嵌入 + 位置嵌入。",
        "norm_f": "对最后一层输出做的最终 LayerNorm。",
        "logits": "logits (B, T, V)：每个位置对词表中每一项的打分；位置 t 预测第 t + 1 个 token。",
        "next_probs": "最后一个位置的 logits 做 softmax：下一个 token 的概率分布。",
        "top5_tiny": "最可能的五个下一个 token。这个小模型的权重是随机的，所以它的猜测没有意义；"
                     "用 --ckpt DIR 可以加载训练好的模型。",
        "top5_loaded": "按加载的模型，最可能的五个下一个 token。",
    },
})


def _tiny_model(options: dict, rng):
    sizes = {name: options[name] or TINY_SIZES[name] for name in TINY_SIZES}
    if sizes["d_model"] % sizes["heads"]:
        raise GlassformerError(f"--heads {sizes['heads']} must divide --d-model "
                               f"{sizes['d_model']}")
    tokenizer = CharTokenizer(sorted(TINY_ALPHABET))
    cfg = gpt2.GPT2Config(vocab_size=tokenizer.vocab_size, max_seq_len=TINY_CONTEXT,
                          n_layer=TINY_LAYERS, n_head=sizes["heads"], d_model=sizes["d_model"])
    std = 1.0 / float(np.sqrt(cfg.d_model))
    params = lively(gpt2.init_params(cfg, rng), rng, std=std)
    return cfg, params, tokenizer


def _loaded_model(options: dict):
    if options["d_model"] is not None or options["heads"] is not None:
        raise GlassformerError("--d-model and --heads do not apply with --ckpt: the loaded "
                               "model's config sets them")
    model = load_pretrained(options["ckpt"])
    if model.family is not gpt2.FAMILY:  # this part runs gpt2.forward itself
        raise GlassformerError(f"explain gpt2 --ckpt needs a GPT-2 model, got {model.arch}")
    if model.tokenizer is None:
        raise GlassformerError(f"{options['ckpt']} has no tokenizer to encode --prompt with")
    return model.cfg, model.params, model.tokenizer


def _forward(inputs: dict, *, cfg, names: list):
    params = {name: inputs[name] for name in names}
    return gpt2.forward(params, inputs["ids"], cfg)


def _inputs(options: dict, rng) -> Setup:
    loaded = options["ckpt"] is not None
    cfg, params, tokenizer = _loaded_model(options) if loaded else _tiny_model(options, rng)
    ids = np.array([tokenizer.encode(options["prompt"])], dtype=np.int64)    # (B=1, T)
    if ids.shape[1] == 0:
        raise GlassformerError("--prompt encodes to no tokens; give some text")
    names = list(params)
    # A few gradients of the tiny model (see CHECKED_TINY); none of a loaded one, whose every
    # weight would need two forward passes.
    last = cfg.n_layer - 1
    checked = () if loaded else tuple(name.format(last=last) for name in CHECKED_TINY)
    pair = Pair(partial(_forward, cfg=cfg, names=names), gpt2.backward)
    static = {"cfg": cfg, "tokenizer": tokenizer, "names": names, "loaded": loaded}
    return Setup({"ids": ids, **params}, pair, static, checked)


def _piece(tokenizer, token_id: int) -> str:
    return repr(tokenizer.decode([int(token_id)]))


def _top_tokens(probs: np.ndarray, tokenizer) -> list[dict]:
    """The TOP_K most likely ids (ties to the lower id) with their text and probability."""
    order = np.argsort(-probs, kind="stable")
    order = order[order < tokenizer.vocab_size][:TOP_K]  # past it: a padded vocab's unused ids
    return [{"id": int(i), "token": tokenizer.decode([int(i)]), "prob": float(probs[i])}
            for i in order]


def _steps(inputs, logits, ctx, static):
    tokenizer = static["tokenizer"]
    ids = inputs["ids"]
    tok, _ = embedding_forward(ctx.tok.ids, inputs["tok_emb"])          # (B, T) -> (B, T, C)
    pos, _ = embedding_forward(ctx.pos.ids, inputs["pos_emb"])          # (T,) -> (T, C)
    x = tok + pos               # the model's `tok + pos`: (B, T, C) + (T, C) -> (B, T, C)
    steps = [step(TEXT, "ids", ids, f"prompt -> ids: {shape_of(ids)}"),
             step(TEXT, "tokens", [_piece(tokenizer, i) for i in ids[0]], "decode([id]) per id",
                  show="tokens"),
             step(TEXT, "tok", tok, f"tok_emb[ids]: {shape_of(ids)} -> {shape_of(tok)}",
                  show="line"),
             step(TEXT, "pos", pos, f"pos_emb[0..T-1]: {shape_of(pos)}", show="line"),
             step(TEXT, "x0", x, f"tok + pos: {shape_of(x)}", show="line")]
    for i, block_ctx in enumerate(ctx.blocks):
        layer, x = layer_steps(block_ctx, x, inputs, f"blocks.{i}.", key_prefix=f"blocks.{i}.",
                               brief=True)
        steps += layer
    norm_f = head_input(ctx.head)                                        # (B, T, C)
    probs, _ = softmax_forward(logits[:, -1])                          # (B, T, V) -> (B, V)
    head = "lm_head" if "lm_head" in inputs else "tok_emb^T (tied)"
    c, v = norm_f.shape[-1], logits.shape[-1]
    steps += [
        step(TEXT, "norm_f", norm_f, f"LayerNorm(x{len(ctx.blocks)}): {shape_of(norm_f)}",
             show="line"),
        step(TEXT, "logits", logits, f"norm_f @ {head}: {shape_of(norm_f)} @ ({c},{v}) -> "
                                     f"{shape_of(logits)}", show="line"),
        step(TEXT, "next_probs", probs[0], f"softmax(logits[0, -1]): ({probs.shape[-1]},)",
             show="line"),
        step(TEXT, "top5", _top_tokens(probs[0], tokenizer), f"top {TOP_K} of "
                                                             f"V={probs.shape[-1]}",
             show="top", text="top5_loaded" if static["loaded"] else "top5_tiny"),
    ]
    return steps


def _backward_steps(dout, grads, ctx, static):
    steps = [step(TEXT, "G", dout, f"dL/dlogits: {shape_of(dout)}", show="line")]
    return steps + param_grad_steps(grads, static["names"])


GPT2 = Part(name="gpt2", defaults=dict(DEFAULTS), make_inputs=_inputs, forward_steps=_steps,
            backward_steps=_backward_steps, text=TEXT)
