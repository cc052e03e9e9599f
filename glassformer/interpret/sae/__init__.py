"""Sparse autoencoders on a model's activations, every forward and backward by hand (issue 45).

    model.py           SAEConfig, init, encode/decode, one training step (sae_forward/backward);
                       the math is ops/sae.py's
    activations.py     a hook's value and the logits with it replaced (run_with_cache/_with_hooks)
    stream.py          a text's windows -> the activation rows, attention sinks left out
    train.py           Adam with unit-norm decoder rows, input scaling, dead features
    evaluate.py        explained variance, L0, CE loss recovered
    saelens_folder.py  SAELens's cfg.json + sae_weights.safetensors, both ways
    run.py             `glassformer sae train` / `sae eval` as library calls
"""
