"""`explain gpt2`: a whole GPT-2 forward over a short prompt, one line per step per layer, ending
with the next-token distribution; with --backward every parameter's gradient.

The model is `glassformer.models.gpt2` itself: a tiny random config over a small character
vocabulary, or a trained run loaded with --ckpt (load_pretrained, with its tokenizer). Everything
is read off the GPT2Ctx of one `forward` call, the ctx `backward` uses:

    tok, pos    embedding_forward on the ids the embedding ctxs saved
    x0          tok + pos, the model's one `+` before the first layer (dropout is the identity
                at inference and keeps nothing)
    layer i     parts_block.layer_steps on ctx.blocks[i]
    norm_f      the input the LM head's LinearCtx saved
    next token  softmax_forward of the last position's logits; top-5 by probability
"""
from __future__ import annotations

import string

import numpy as np

from glassformer.errors import GlassformerError
from glassformer.explain.parts_block import layer_steps, param_grad_steps
from glassformer.explain.parts_core import Part, lively, shape_of, step
from glassformer.models import gpt2
from glassformer.ops.embedding import embedding_forward
from glassformer.ops.softmax import softmax_forward
from glassformer.tokenizers.char import CharTokenizer

# The tiny model's vocabulary: lowercase letters, space and a little punctuation (V = 34).
TINY_ALPHABET = string.ascii_lowercase + " .,;!?'\n"
TINY_LAYERS = 2
TINY_CONTEXT = 16
TINY_SIZES = {"d_model": 8, "heads": 2}
GPT2_DEFAULTS = {"d_model": None, "heads": None, "prompt": "hello", "ckpt": None}
TOP_K = 5
# Which gradients the finite-difference check covers on the tiny model. Every one of them would
# keep the command waiting (docs/performance.md); these cover both ends of the tied embedding, a
# position row, the first layer's attention, the last layer's MLP and the final norm.
CHECKED_TINY = ("tok_emb", "pos_emb", "blocks.0.norm1.w", "blocks.0.attn.wq",
                "blocks.{last}.mlp.w_down", "norm_f.w", "norm_f.b")


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
    from glassformer.io.pretrained import load_pretrained

    if options["d_model"] is not None or options["heads"] is not None:
        raise GlassformerError("--d-model and --heads do not apply with --ckpt: the loaded "
                               "model's config sets them")
    model = load_pretrained(options["ckpt"])
    if model.arch != "gpt2":
        raise GlassformerError(f"explain gpt2 --ckpt needs a GPT-2 model, got {model.arch}")
    if model.tokenizer is None:
        raise GlassformerError(f"{options['ckpt']} has no tokenizer to encode --prompt with")
    return model.cfg, model.params, model.tokenizer


def _gpt2_inputs(options: dict, rng):
    loaded = options["ckpt"] is not None
    cfg, params, tokenizer = _loaded_model(options) if loaded else _tiny_model(options, rng)
    ids = np.array([tokenizer.encode(options["prompt"])], dtype=np.int64)    # (B=1, T)
    if ids.shape[1] == 0:
        raise GlassformerError("--prompt encodes to no tokens; give some text")
    static = {"cfg": cfg, "tokenizer": tokenizer, "names": list(params), "loaded": loaded}
    return {"ids": ids, **params}, static


def _gpt2_forward(inputs, static):
    params = {name: inputs[name] for name in static["names"]}
    return gpt2.forward(params, inputs["ids"], static["cfg"])


def _gpt2_backward(dout, ctx, static):
    return gpt2.backward(dout, ctx)


def _piece(tokenizer, token_id: int) -> str:
    return repr(tokenizer.decode([int(token_id)]))


def _top_tokens(probs: np.ndarray, tokenizer) -> list[dict]:
    """The TOP_K most likely ids (ties to the lower id) with their text and probability."""
    order = np.argsort(-probs, kind="stable")[:TOP_K]
    return [{"id": int(i), "token": tokenizer.decode([int(i)]), "prob": float(probs[i])}
            for i in order]


def _gpt2_steps(inputs, logits, ctx, static):
    tokenizer = static["tokenizer"]
    ids = inputs["ids"]
    tok, _ = embedding_forward(ctx.tok.ids, inputs["tok_emb"])          # (B, T) -> (B, T, C)
    pos, _ = embedding_forward(ctx.pos.ids, inputs["pos_emb"])          # (T,) -> (T, C)
    x = tok + pos               # the model's `tok + pos`: (B, T, C) + (T, C) -> (B, T, C)
    steps = [step("ids", ids, f"prompt -> ids: {shape_of(ids)}"),
             step("tokens", [_piece(tokenizer, i) for i in ids[0]], "decode([id]) per id",
                  show="tokens"),
             step("tok", tok, f"tok_emb[ids]: {shape_of(ids)} -> {shape_of(tok)}", show="line"),
             step("pos", pos, f"pos_emb[0..T-1]: {shape_of(pos)}", show="line"),
             step("x0", x, f"tok + pos: {shape_of(x)}", show="line")]
    for i, block_ctx in enumerate(ctx.blocks):
        layer, x = layer_steps(block_ctx, x, inputs, f"blocks.{i}.", key_prefix=f"blocks.{i}.",
                               brief=True, layer=i)
        steps += layer
    norm_f = ctx.head.lm_head.linear.x                                   # (B, T, C)
    probs, _ = softmax_forward(logits[:, -1])                          # (B, T, V) -> (B, V)
    head = "lm_head" if "lm_head" in inputs else "tok_emb^T (tied)"
    c, v = norm_f.shape[-1], logits.shape[-1]
    steps += [
        step("norm_f", norm_f, f"LayerNorm(x{len(ctx.blocks)}): {shape_of(norm_f)}",
             show="line"),
        step("logits", logits, f"norm_f @ {head}: {shape_of(norm_f)} @ ({c},{v}) -> "
                               f"{shape_of(logits)}", show="line"),
        step("next_probs", probs[0], f"softmax(logits[0, -1]): ({probs.shape[-1]},)",
             show="line"),
        step("top5", _top_tokens(probs[0], tokenizer), f"top {TOP_K} of V={probs.shape[-1]}",
             show="top", text="top5_loaded" if static["loaded"] else "top5_tiny"),
    ]
    return steps


def _gpt2_backward_steps(dout, grads, ctx, static):
    steps = [step("G", dout, f"dL/dlogits: {shape_of(dout)}", text="common:G", show="line")]
    return steps + param_grad_steps(grads, static["names"])


def _checked(inputs, static):
    """A few gradients of the tiny model (see CHECKED_TINY); none of a loaded one, whose every
    weight would need two forward passes."""
    if static["loaded"]:
        return None
    last = static["cfg"].n_layer - 1
    return [name.format(last=last) for name in CHECKED_TINY]


GPT2 = Part(name="gpt2", defaults=dict(GPT2_DEFAULTS), make_inputs=_gpt2_inputs,
            forward=_gpt2_forward, backward=_gpt2_backward, forward_steps=_gpt2_steps,
            backward_steps=_gpt2_backward_steps, checked=_checked)
