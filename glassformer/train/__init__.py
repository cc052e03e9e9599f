"""Training. On top, the files to read first: loop.py (the loop, TrainConfig), step.py (one step:
the seam the loop calls), optim.py (AdamW, clipping), schedule.py (learning rate), data.py (token
files and windows), distributed.py (the step over MPI ranks). Then objectives/ (what a run
learns), datasets/ (pairs, chat), runs/ (run folders: text, pairs, fine-tune) and recipes/ (the
settings of each kind of training that works)."""
