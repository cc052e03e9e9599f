"""Blocks built only from ops: attention (self/cross, GQA, RoPE/ALiBi, QK-norm, KV cache), MLP
(plain and gated), the sparse mixture-of-experts MLP, multi-head latent attention (DeepSeek's MLA,
blocks/mla.py), norms, and the pre-/post-norm residual layer. Every block is a forward/backward
pair whose backward returns (grads, dx) or (grads, dx, dmemory); `*_shapes(cfg)` give each block's
param names and shapes, which `init_*` draw from."""
from glassformer.blocks.attention import (attention_block_backward, attention_block_forward,
                                          attention_shapes, init_attention)
from glassformer.blocks.config import BlockConfig, MoEConfig
from glassformer.blocks.kv_cache import KVCache
from glassformer.blocks.mla import init_mla, mla_block_backward, mla_block_forward, mla_shapes
from glassformer.blocks.mlp import init_mlp, mlp_backward, mlp_forward, mlp_shapes
from glassformer.blocks.moe import init_moe, moe_backward, moe_forward, moe_shapes
from glassformer.blocks.residual import block_backward, block_forward, block_shapes, init_block

__all__ = ["BlockConfig", "KVCache", "attention_block_forward", "attention_block_backward",
           "attention_shapes", "init_attention", "mlp_forward", "mlp_backward", "mlp_shapes",
           "init_mlp", "block_forward", "block_backward", "block_shapes", "init_block",
           "MoEConfig", "moe_forward", "moe_backward", "moe_shapes", "init_moe",
           "mla_block_forward", "mla_block_backward", "mla_shapes", "init_mla"]
