"""Looking inside a model: TransformerLens's hook points, caches and hooks, activation patching,
logit attribution and head detectors, on every family glassformer loads (layer 5).

    hooks.py        the hook points' names and shapes, read off a forward's ctx
    cache.py        run_with_cache, run_with_hooks
    patching.py     activation patching over layers x positions (and heads)
    attribution.py  direct logit attribution; attribution patching (one forward, one backward)
    heads.py        induction, previous-token and duplicate-token head scores

Replacing a value mid-forward is blocks/hooks.py's (the forward asks at a few named points).
Sparse autoencoders live in interpret/sae/.
"""
