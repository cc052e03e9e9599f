"""Training runs in folders: folder.py (the layout: lock, data record, tokenizer, the loop's
start), text.py (a text file's run: next-token, mlm), pairs.py (a pair set's run: seq2seq),
finetune.py (a pretrained model's LoRA or full fine-tune), start.py (what `glassformer train`
calls, new or resumed), checks.py (settings checked before anything is written), signals.py
(Ctrl-C checkpoints), progress.py (the progress bar)."""
