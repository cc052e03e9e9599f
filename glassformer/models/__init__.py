"""Model families: gpt2 (learned positions, LayerNorm, GELU), llama (RoPE, RMSNorm, SwiGLU, GQA),
bert (post-norm encoder). Each module has a Config, init_params, forward and backward."""
