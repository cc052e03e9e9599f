"""Training: optim.py (AdamW, SGD, clipping), schedule.py (learning rate), data.py (batches)."""
