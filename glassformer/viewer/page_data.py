"""The data one model page holds: tokens, groups, packed attention, logit lens, norms, one head.

`model_page_data(inspection, ...)` returns a JSON-ready dict; page.py writes it into the HTML and
static/viewer.js draws it. Keys (docs/viewer.md lists them with the page contract):

    model, arch, causal, text, n_layer, n_head, n_kv_head, layers, heads, T, S
    tokens  [{id, text, hex, whole, pad}]        groups  [{text, tokens}]
    attention {layer: {"q", "max"}}               (pack.py; only the layers and heads chosen)
    lens    {k, layers: [{ids, p, rank, entropy}]} or null for an encoder; vocab {id: text}
    mlm     a BERT with its masked-LM head: {k, ids (T, k), p (T, k), masked: [positions of
            [MASK]]}, the model's own top-k at every position; else null
    norms   (L + 1) x T residual-stream norms
    steps   one head's sub-steps: {layer, head, kv_head, scores, masked, weights, output, text}
    experts a Mixture-of-Experts model's routing per sparse layer (viewer/experts.py), else null
"""
from __future__ import annotations

import math

import numpy as np

from glassformer.blocks.attention import merged_heads
from glassformer.blocks.residual import attention_block_ctx
from glassformer.errors import GlassformerError
from glassformer.explain.parts.attention import TEXT as SEED_TEXT
from glassformer.explain.parts.attention import attention_arrays
from glassformer.ops.softmax import masked_logits, softmax_forward
from glassformer.viewer.experts import experts_data, routes_of
from glassformer.viewer.inspection import Inspection
from glassformer.viewer.pack import pack_layer
from glassformer.viewer.tokens import describe_tokens, token_groups

# note: the documented size budget (docs/viewer.md): past it, choose --layers and --heads.
ATTENTION_BUDGET_BYTES = 12_000_000
DIGITS = 4  # decimals kept for the numbers written as JSON


def parse_selection(spec: str | None, count: int, what: str) -> list[int]:
    """'0,2,5-7' -> [0, 2, 5, 6, 7]; None -> all of range(count). One-line errors."""
    if spec is None:
        return list(range(count))
    chosen = []
    for part in spec.split(","):
        low, _, high = part.strip().partition("-")
        try:
            first, last = int(low), int(high or low)
        except ValueError:
            raise GlassformerError(f"--{what}: expected numbers like 0,2,5-7, got {spec!r}") from None
        if not 0 <= first <= last < count:
            raise GlassformerError(f"--{what} {part.strip()} is out of range: this model has "
                                   f"{count} {what} (0..{count - 1})")
        chosen.extend(range(first, last + 1))
    return sorted(set(chosen))


def attention_bytes(n_layers: int, n_heads: int, t: int, s: int, causal: bool) -> int:
    """Bytes the packed attention takes in the page (base64: 4 characters per 3 bytes)."""
    per_head = t * (t + 1) // 2 if causal and t == s else t * s
    raw = n_layers * n_heads * (per_head + 4 * t)
    return 4 * math.ceil(raw / 3)


def model_page_data(inspection: Inspection, *, name: str, text: str | None, layers: list[int],
                    heads: list[int], k: int = 5) -> dict:
    """Everything the model page shows, for batch row 0."""
    model = inspection.model
    _, n_head, t, s = inspection.attentions[0].shape
    causal = inspection.causal
    size = attention_bytes(len(layers), len(heads), t, s, causal)
    if size > ATTENTION_BUDGET_BYTES:
        raise GlassformerError(
            f"the attention of {len(layers)} layers x {len(heads)} heads over {t} tokens takes "
            f"{size / 1e6:.1f} MB, past the page budget of {ATTENTION_BUDGET_BYTES / 1e6:.0f} MB; "
            "choose fewer with --layers and --heads")
    ids = inspection.ids[0].tolist()
    tokens = describe_tokens(model.tokenizer, ids)
    pad = ~inspection.key_mask[0]
    data = {
        "kind": "model", "model": name, "arch": model.arch, "causal": causal, "text": text,
        "n_layer": len(inspection.attentions), "n_head": n_head,
        "n_kv_head": model.cfg.block_config().kv_heads, "layers": layers, "heads": heads,
        "T": t, "S": s,
        "tokens": [{"id": tok.id, "text": tok.text, "hex": tok.hex, "whole": tok.whole,
                    "pad": bool(is_pad)} for tok, is_pad in zip(tokens, pad)],
        "groups": [{"text": g.text, "tokens": g.tokens}
                   for g in token_groups(model.tokenizer, ids, text)],
        "attention": {str(layer): pack_layer(inspection.attentions[layer][0][heads], causal)
                      for layer in layers},
        "norms": np.round(inspection.residual_norms()[:, 0], 3).tolist(),       # (L + 1, T)
        "steps": head_steps(inspection, layers[0], heads[0]),
        "lens": None, "mlm": None, "vocab": {},
        "experts": model_experts(inspection, pad),
    }
    if causal:
        data["lens"], data["vocab"] = lens_data(inspection, k)
    elif getattr(model.cfg, "mlm_head", False):
        data["mlm"], data["vocab"] = mlm_data(inspection, k)
    return data


def model_experts(inspection: Inspection, pad: np.ndarray) -> dict | None:
    """The experts view of an MoE model (viewer/experts.py), None for a dense one."""
    moe = inspection.model.cfg.block_config().moe
    if moe is None:
        return None
    routes = routes_of(inspection.ctx, inspection.ids.shape[1])
    return experts_data(routes, moe.n_experts, pad)


def mlm_data(inspection: Inspection, k: int) -> tuple[dict, dict]:
    """A masked-LM BERT's top-k tokens at every position of row 0 (its logits, softmaxed), and
    the display text of every id named; `masked` lists the [MASK] positions."""
    probs, _ = softmax_forward(inspection.out[0])                            # (T, V)
    k = min(k, probs.shape[-1])
    top = np.argsort(-probs, axis=-1, kind="stable")[:, :k]                  # (T, k), best first
    top_probs = np.take_along_axis(probs, top, axis=-1)                      # (T, k)
    tokenizer = inspection.model.tokenizer
    mask_id = tokenizer.special_tokens.get("[MASK]") if tokenizer is not None else None
    ids = inspection.ids[0]
    named = sorted(set(top.ravel().tolist()))
    size = tokenizer.vocab_size if tokenizer is not None else probs.shape[-1]
    # a --tokenizer run's model pads its vocab past the tokenizer's (train/runs/text.py): no text there
    vocab = {str(tok.id): tok.text
             for tok in describe_tokens(tokenizer, [i for i in named if i < size])}
    vocab.update({str(i): f"<padding id {i}>" for i in named if i >= size})
    return {"k": k, "ids": top.tolist(),
            "p": np.round(top_probs.astype(np.float64), DIGITS).tolist(),
            "masked": np.flatnonzero(ids == mask_id).tolist() if mask_id is not None else []}, vocab


def lens_data(inspection: Inspection, k: int) -> tuple[dict, dict]:
    """The logit lens of row 0 as lists, and the display text of every id it names."""
    lens = inspection.logit_lens(k)
    layers = [{"ids": lens.ids[layer, 0].tolist(),                              # (T, k)
               "p": np.round(lens.probs[layer, 0].astype(np.float64), DIGITS).tolist(),
               "rank": lens.rank[layer, 0].tolist(),                            # (T,)
               "entropy": np.round(lens.entropy[layer, 0].astype(np.float64), 3).tolist()}
              for layer in range(lens.ids.shape[0])]
    seen = sorted(set(lens.ids[:, 0].ravel().tolist()) | set(lens.final[0].tolist()))
    tokenizer = inspection.model.tokenizer
    # a --tokenizer run's model pads its vocab past the tokenizer's (train/runs/text.py): no text there
    vocab = {str(tok.id): tok.text
             for tok in describe_tokens(tokenizer, [i for i in seen if i < tokenizer.vocab_size])}
    vocab.update({str(i): f"<padding id {i}>" for i in seen if i >= tokenizer.vocab_size})
    return {"k": int(lens.ids.shape[-1]), "final": lens.final[0].tolist(), "layers": layers}, vocab


def head_steps(inspection: Inspection, layer: int, head: int) -> dict:
    """One head's sub-steps, read from its attention ctx, labelled with the seed's own text."""
    block = attention_block_ctx(inspection.ctx.blocks[layer])
    attn = block.attn                        # the op's ctx: q (B, K, G, T, D), k (B, K, 1, S, D)
    if attn.q.ndim == 4:    # latent attention (blocks/mla.py): (B, H, T, D), a key head per head
        kv_head, pick = head, (0, head)
    else:
        kv_head, g = divmod(head, attn.q.shape[2])
        pick = (0, kv_head, g)
    scores, weights = attention_arrays(attn)                    # (B, K, G, T, S) each
    if attn.bias is not None:
        scores = scores + attn.bias
    masked = masked_logits(scores, attn.allowed)
    # the head's output is its slice of the merged heads that the out projection saved
    merged = merged_heads(block)                                # (B, T, H*D)
    d = attn.v.shape[-1]
    output = merged[0, :, head * d:(head + 1) * d]              # (T, D)
    masked_row = masked[pick]
    return {
        "layer": layer, "head": head, "kv_head": kv_head,
        "scores": _rounded(scores[pick]), "weights": _rounded(weights[pick]),
        "masked": [[None if math.isinf(v) else v for v in row] for row in _rounded(masked_row)],
        "output": _rounded(output),
        "text": {lang: {key: SEED_TEXT[lang][key]
                        for key in ("scores", "masked_scores", "weights", "output")}
                 for lang in SEED_TEXT},
    }


def _rounded(x: np.ndarray) -> list:
    return np.round(x.astype(np.float64), DIGITS).tolist()
