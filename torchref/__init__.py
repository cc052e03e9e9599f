"""PyTorch reference models for tests and benchmarks only (never imported by glassformer)."""
