"""Sliding windows in config.json: `sliding_window` and `layer_types` <-> (window, full_layers).

transformers names a windowed model's attention per layer in `layer_types` ("sliding_attention"
or "full_attention", one per layer), and the window in `sliding_window` (W: query i sees keys
i - W < j <= i, masking_utils' `sliding_window_overlay`). glassformer keeps the same facts as
its configs' `sliding_window` (W or None) and `full_layers` (the layers that do not slide).

Mistral is the exception: MistralForCausalLM slides every layer whatever layer_types says, so
its loader passes every_layer=True. Qwen2 slides only with use_sliding_window, and then only
layers from max_window_layers on when its config.json has no layer_types.
"""
from __future__ import annotations

from glassformer.errors import GlassformerError

SLIDING, FULL = "sliding_attention", "full_attention"


def window_fields(hf: dict, *, in_use: bool = True, every_layer: bool = False) -> dict:
    """{"sliding_window": W or None, "full_layers": (...)} from a config.json. in_use=False: the
    model_type turned its window off (Qwen2's use_sliding_window), W is ignored."""
    n_layer = hf["num_hidden_layers"]
    layer_types = hf.get("layer_types")
    if layer_types is not None and len(layer_types) != n_layer:
        raise GlassformerError(f"config.json layer_types has {len(layer_types)} entries, but "
                               f"num_hidden_layers is {n_layer} (one type per layer)")
    window = hf.get("sliding_window")
    if not in_use or window is None:
        return {"sliding_window": None, "full_layers": ()}
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise GlassformerError(f"config.json sliding_window must be a whole number of tokens "
                               f">= 1, got {window!r}")
    if every_layer or layer_types is None:
        first = 0 if every_layer else int(hf.get("max_window_layers") or 0)
        full = tuple(range(min(first, n_layer)))
    else:
        full = tuple(i for i, kind in enumerate(layer_types) if kind == FULL)
    if len(full) == n_layer:   # no layer slides: the same model as no window at all
        return {"sliding_window": None, "full_layers": ()}
    return {"sliding_window": int(window), "full_layers": full}


def layer_types(cfg) -> list[str]:
    """config.json's layer_types for a config with sliding_window and full_layers."""
    return [FULL if cfg.sliding_window is None or i in cfg.full_layers else SLIDING
            for i in range(cfg.n_layer)]
