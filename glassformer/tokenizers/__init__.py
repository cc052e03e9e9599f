"""Tokenizers written from scratch: characters, byte-level BPE (GPT-2, SmolLM2, tiktoken files) and
BERT's WordPiece. Each module is importable on its own; `glassformer.load_tokenizer(path)` reads any
of the supported file layouts.

    base.py        the shared interface (encode, decode, vocab_size, special_tokens, save/load)
    char.py        one id per character of a corpus
    pretokenize.py the byte <-> printable-character table and the pre-tokenizer regexes
    bpe.py         byte-level BPE encode/decode (merges applied by rank)
    bpe_train.py   learning merges from text (the pair-count loop)
    wordpiece.py   BERT: basic tokenizer, greedy longest-match-first, pairs, padding, truncation
    load.py        recognise a folder or file and build the right tokenizer
"""
