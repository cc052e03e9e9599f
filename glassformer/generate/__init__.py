"""Text generation: sampling and the token-by-token generate loop (KVCache lives in blocks/)."""
