"""Reading and writing weights and checkpoints: safetensors.py (the file format), checkpoint.py."""
