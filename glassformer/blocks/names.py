"""Param-name plumbing shared by blocks and models: one dotted name space, local names below it.

A model's params are one flat dict with dotted names ("blocks.3.attn.wq"). Each block reads only
its own entries, under local names ("wq"): the caller takes them out with `sub_params` and puts
the block's grads back under the full names with `prefixed`.

    params  {"blocks.3.attn.wq": W, "blocks.3.attn.wk": ..., "tok_emb": ...}
    sub_params(params, "blocks.3.attn.")  ->  {"wq": W, "wk": ...}
    prefixed({"wq": dW, ...}, "blocks.3.attn.")  ->  {"blocks.3.attn.wq": dW, ...}
"""
from __future__ import annotations


def sub_params(params: dict, prefix: str) -> dict:
    """The entries of `params` under `prefix` ("attn."), with the prefix removed.

    >>> sub_params({"attn.wq": 1, "mlp.w_up": 2}, "attn.")
    {'wq': 1}
    """
    return {key[len(prefix):]: value for key, value in params.items() if key.startswith(prefix)}


def prefixed(entries: dict, prefix: str) -> dict:
    """The same entries (params, grads or shapes) with `prefix` put before every name.

    >>> prefixed({"wq": 1}, "attn.")
    {'attn.wq': 1}
    """
    return {prefix + key: value for key, value in entries.items()}
