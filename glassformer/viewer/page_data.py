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
    steps   one head's sub-steps: {layer, head, kv_head, scores, masked, weights, output, text},
            over the first STEPS_MAX_T tokens (a longer text's T x T matrices would not be read)
    experts a Mixture-of-Experts model's routing per sparse layer (viewer/experts.py), else null

Budgets (issue 32): `check_page_budget` runs before the forward, from the token count alone, and
its refusal names --layers and --heads values that fit (so following it works).
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
from glassformer.viewer.pack import pack_layer

# note: "Inspection" (viewer/inspection.py) is named, not imported: its view() draws through this
# module (viewer/display.py), and an import back would close a circle.
from glassformer.viewer.tokens import describe_tokens, token_groups

# note: the documented size budget (docs/viewer.md): past it, choose --layers and --heads.
ATTENTION_BUDGET_BYTES = 12_000_000
DIGITS = 4  # decimals kept for the numbers written as JSON
STEPS_MAX_T = 128  # the step-by-step view shows at most this many queries and keys


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


def check_page_budget(layers: list[int], heads: list[int], t: int, s: int, causal: bool,
                      budget: int | None = None) -> None:
    """Refuse, in one line, a page whose attention would pass `budget` bytes (default
    ATTENTION_BUDGET_BYTES; `show --max-page-mb`), naming --layers and --heads values that fit,
    or the text length that does."""
    budget = ATTENTION_BUDGET_BYTES if budget is None else budget
    size = attention_bytes(len(layers), len(heads), t, s, causal)
    if size <= budget:
        return
    fit = budget // attention_bytes(1, 1, t, s, causal)   # layer x head pairs
    head = f"the attention of {len(layers)} layers x {len(heads)} heads over {t} tokens takes " \
           f"{size / 1e6:.1f} MB, past the page budget of {budget / 1e6:.0f} MB (--max-page-mb)"
    if fit == 0:
        tokens = t
        while tokens > 1 and attention_bytes(1, 1, tokens, tokens, causal) > budget:
            tokens = tokens * 9 // 10
        raise GlassformerError(f"{head}; even one head of one layer does not fit: shorten the "
                               f"text to about {tokens} tokens")
    n_heads = min(len(heads), fit)
    n_layers = min(len(layers), fit // n_heads)
    raise GlassformerError(f"{head}; choose fewer, e.g. --layers {_span(layers[:n_layers])} "
                           f"--heads {_span(heads[:n_heads])}")


def _span(chosen: list[int]) -> str:
    """[0, 1, 2] -> '0-2', [4] -> '4', [0, 3] -> '0,3' (the syntax parse_selection reads)."""
    if len(chosen) > 1 and chosen == list(range(chosen[0], chosen[-1] + 1)):
        return f"{chosen[0]}-{chosen[-1]}"
    return ",".join(str(i) for i in chosen)


def model_page_data(inspection: "Inspection", *, name: str, text: str | None, layers: list[int],
                    heads: list[int], k: int = 5, budget: int | None = None) -> dict:
    """Everything the model page shows, for batch row 0."""
    model = inspection.model
    _, n_head, t, s = next(a for a in inspection.attentions if a is not None).shape
    causal = inspection.causal
    check_page_budget(layers, heads, t, s, causal, budget)
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
        data["lens"], data["vocab"] = lens_data(inspection, k, layers)
    elif getattr(model.cfg, "mlm_head", False):
        data["mlm"], data["vocab"] = mlm_data(inspection, k)
    return data


def model_experts(inspection: "Inspection", pad: np.ndarray) -> dict | None:
    """The experts view of an MoE model (viewer/experts.py), None for a dense one."""
    moe = inspection.model.cfg.block_config().moe
    if moe is None:
        return None
    routes = routes_of(inspection.ctx, inspection.ids.shape[1])
    return experts_data(routes, moe.n_experts, pad)


def mlm_data(inspection: "Inspection", k: int) -> tuple[dict, dict]:
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


def lens_data(inspection: "Inspection", k: int, layers: list[int] | None = None
              ) -> tuple[dict, dict]:
    """The logit lens of row 0 as lists (a row per layer; None for a layer not chosen), and the
    display text of every id it names."""
    n_layer = len(inspection.attentions)
    lens = inspection.logit_lens(k, layers)
    rows = dict(zip(lens.layers, range(len(lens.layers))))
    table = [None if layer not in rows else
             {"ids": lens.ids[rows[layer], 0].tolist(),                          # (T, k)
              "p": np.round(lens.probs[rows[layer], 0].astype(np.float64), DIGITS).tolist(),
              "rank": lens.rank[rows[layer], 0].tolist(),                        # (T,)
              "entropy": np.round(lens.entropy[rows[layer], 0].astype(np.float64), 3).tolist()}
             for layer in range(n_layer)]
    seen = sorted(set(lens.ids[:, 0].ravel().tolist()) | set(lens.final[0].tolist()))
    tokenizer = inspection.model.tokenizer
    # a --tokenizer run's model pads its vocab past the tokenizer's (train/runs/text.py): no text there
    vocab = {str(tok.id): tok.text
             for tok in describe_tokens(tokenizer, [i for i in seen if i < tokenizer.vocab_size])}
    vocab.update({str(i): f"<padding id {i}>" for i in seen if i >= tokenizer.vocab_size})
    return {"k": int(lens.ids.shape[-1]), "final": lens.final[0].tolist(), "layers": table}, vocab


def head_steps(inspection: "Inspection", layer: int, head: int) -> dict:
    """One head's sub-steps over the first STEPS_MAX_T tokens, read from its attention ctx (that
    head alone: a long text's other heads are never expanded), labelled with the seed's text."""
    block = attention_block_ctx(inspection.ctx.blocks[layer])
    attn = block.attn                        # the op's ctx: q (B, K, G, T, D), k (B, K, 1, S, D)
    n = min(STEPS_MAX_T, attn.q.shape[-2])
    if attn.q.ndim == 4:    # latent attention (blocks/mla.py): q (B, H, T, D), a key head per head
        kv_head, head_of = head, (slice(0, 1), slice(head, head + 1))
    else:                   # grouped: q (B, K, G, T, D), k (B, K, 1, S, D)
        kv_head, g = divmod(head, attn.q.shape[2])
        head_of = (slice(0, 1), slice(kv_head, kv_head + 1), slice(g, g + 1))
    first_n = (slice(0, n),)
    key_of = head_of[:2] + (slice(None),) * (attn.k.ndim - 4) + first_n
    # note: the first n queries of a causal head see only the first n keys: these rows are whole
    one = attn._replace(q=attn.q[head_of + first_n], k=attn.k[key_of],
                        allowed=_one_head_of(attn.allowed, attn, head_of, n),
                        bias=_one_head_of(attn.bias, attn, head_of, n),
                        softmax=attn.softmax._replace(
                            probs=attn.softmax.probs[head_of + first_n + first_n]))
    scores, weights = attention_arrays(one)                     # one head's (.., n, n) each
    if one.bias is not None:
        scores = scores + one.bias
    masked = masked_logits(scores, one.allowed)
    # the head's output is its slice of the merged heads that the out projection saved
    merged = merged_heads(block)                                # (B, T, H*D)
    d = attn.v.shape[-1]
    output = merged[0, :n, head * d:(head + 1) * d]             # (n, D)
    pick = (0,) * len(head_of)
    return {
        "layer": layer, "head": head, "kv_head": kv_head,
        "scores": _rounded(scores[pick]), "weights": _rounded(weights[pick]),
        "masked": [[None if math.isinf(v) else v for v in row] for row in _rounded(masked[pick])],
        "output": _rounded(output),
        "text": {lang: {key: SEED_TEXT[lang][key]
                        for key in ("scores", "masked_scores", "weights", "output")}
                 for lang in SEED_TEXT},
    }


def _one_head_of(mask_or_bias, attn, head_of: tuple, n: int):
    """A mask or bias broadcastable to the weights ((B, K, G, T, S), or (B, H, T, S) for latent
    attention), cut to one head's first n x n entries (a view), or None."""
    if mask_or_bias is None:
        return None
    full = np.broadcast_to(mask_or_bias, attn.softmax.probs.shape)          # a view, no copy
    return full[head_of + (slice(0, n), slice(0, n))]


def _rounded(x: np.ndarray) -> list:
    return np.round(x.astype(np.float64), DIGITS).tolist()
