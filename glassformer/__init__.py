"""glassformer: a Transformer you can see through, every forward and backward pass by hand in NumPy.

The calls most scripts need, at the package top:

    load_pretrained(path_or_name)       a Model from an HF folder, a run, a .gguf or a packaged name
    save_pretrained(model, directory)   its inverse: a folder transformers' from_pretrained reads
    load_tokenizer(path_or_name)        a tokenizer from its files or a packaged name
    fill_mask, embed, translate,        the tasks (glassformer/tasks/): a masked-LM's guesses,
    open_chat, perplexity               sentence embeddings, an encoder-decoder's output, a chat
                                        session, loss and perplexity on a text
    inspect(model, text)                what one forward pass computed (glassformer/viewer/)
    render_chat(template, messages)     a chat in its template (tokenizers/chat_template.py)
    trace(part, **options)              one explain part's steps and gradient check (viewer/trace.py)
    walkthrough()                       the seed's self-attention walkthrough (viewer/seed_page.py)
    tokenize(tokenizer, text)           a text's tokens, characters cut into bytes shown as bytes

In Jupyter every result above draws itself inline (`_repr_html_`, glassformer/display.py): the
viewer's pages with their data, CSS and JS inline, no URL; `.view(lang="zh")` picks the language.

note: each name is imported when it is first used (PEP 562's module `__getattr__`), so
`import glassformer` loads none of them: the viewer, matplotlib, jinja2 (chat templates) and
mpi4py (training's ranks) come only with the call that needs them.
"""
from __future__ import annotations

import importlib

# Each exported name -> the module that defines it under that name.
EXPORTS = {
    "load_pretrained": "glassformer.io.pretrained",
    "save_pretrained": "glassformer.io.pretrained",
    "load_tokenizer": "glassformer.tokenizers.load",
    "fill_mask": "glassformer.tasks.fill_mask",
    "embed": "glassformer.tasks.embed",
    "translate": "glassformer.tasks.translate",
    "open_chat": "glassformer.tasks.chat",
    "perplexity": "glassformer.tasks.perplexity",
    "preference_accuracy": "glassformer.tasks.preferences",
    "inspect": "glassformer.viewer.inspection",
    "render_chat": "glassformer.tokenizers.chat_template",
    "trace": "glassformer.viewer.trace",
    "walkthrough": "glassformer.viewer.seed_page",
    "tokenize": "glassformer.viewer.token_view",
    "run_with_cache": "glassformer.interpret.cache",
    "run_with_hooks": "glassformer.interpret.cache",
    "patch": "glassformer.interpret.patching",
    "logit_attribution": "glassformer.interpret.attribution",
    "attribution_patch": "glassformer.interpret.attribution",
    "head_scores": "glassformer.interpret.heads",
}

__all__ = list(EXPORTS)


def __getattr__(name: str):
    """glassformer.<name>: import its module now and return the name from it."""
    if name not in EXPORTS:
        raise AttributeError(f"module 'glassformer' has no attribute {name!r}")
    return getattr(importlib.import_module(EXPORTS[name]), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
