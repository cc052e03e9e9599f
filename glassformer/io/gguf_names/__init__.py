"""llama.cpp's GGUF names and metadata for the families io/gguf_hf.py reads and writes (Gemma 3,
Qwen3-Next, Qwen3.5): a family's tensor rows and its metadata <-> config.json, ending in its
GGUFArch records (records.py). The LLaMA GGUF reader (io/gguf.py) keeps its own table."""
from __future__ import annotations

from glassformer.io.gguf_names.gemma3 import GEMMA3
from glassformer.io.gguf_names.qwen3_next_meta import QWEN3_5, QWEN3_NEXT

BY_GGUF_NAME = {record.name: record for record in (GEMMA3, QWEN3_NEXT, QWEN3_5)}
BY_ARCH = {record.arch: record for record in (GEMMA3, QWEN3_NEXT, QWEN3_5)}
