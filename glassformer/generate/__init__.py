"""Text generation: KV cache, sampling, and the token-by-token generate loop."""
