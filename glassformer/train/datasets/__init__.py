"""Data that is not one token stream, read and encoded for an objective's draw: pairs.py
(CMUdict, Tang couplets, TSV source/target pairs, for the seq2seq objective) and chat.py (chat
JSONL conversations with loss on the replies, for sft). A text's token stream is train/data.py's."""
