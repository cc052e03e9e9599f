"""Model families: gpt2 (learned positions, LayerNorm, GELU), llama (RoPE, RMSNorm, SwiGLU, GQA),
bert (post-norm encoder). Each module exports one `FAMILY` record (models/family.py): its config
class, param_shapes, init_params, forward, backward, KV layout; models/registry.py lists them."""
