"""Blocks built only from ops: attention (self/cross, GQA, RoPE/ALiBi, KV cache), MLP (plain and
gated), norms, and the pre-/post-norm residual layer. Every block is a forward/backward pair."""
from glassformer.blocks.attention import (attention_block_backward, attention_block_forward,
                                          init_attention)
from glassformer.blocks.config import BlockConfig
from glassformer.blocks.mlp import init_mlp, mlp_backward, mlp_forward
from glassformer.blocks.residual import block_backward, block_forward, init_block

__all__ = ["BlockConfig", "attention_block_forward", "attention_block_backward", "init_attention",
           "mlp_forward", "mlp_backward", "init_mlp", "block_forward", "block_backward",
           "init_block"]
