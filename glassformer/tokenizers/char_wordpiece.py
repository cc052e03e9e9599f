"""A char tokenizer with BERT's special tokens, as the BERT WordPiece files transformers reads.

A masked-LM run (`train --arch bert`) tokenizes one character per id, with [PAD] [UNK] [CLS]
[SEP] [MASK] after the characters. Exported (io/pretrained.save_pretrained), it becomes a
WordPiece vocabulary whose tokens are those characters, ids unchanged: vocab.txt (line n = id n),
tokenizer.json and tokenizer_config.json, which BertTokenizerFast and pipeline("fill-mask") load.

Why the ids agree: BERT's basic tokenizer puts every CJK ideograph in a word of its own
(tokenize_chinese_chars) and splits off every punctuation mark, and WordPiece then finds each
one-character word in the vocabulary: a Chinese poem gets exactly the char tokenizer's ids.
Where they differ, and why it does not matter for Chinese text: BERT drops whitespace (so the
space and newline tokens become [unusedN] lines, vocab.txt cannot hold them) and groups a run of
other characters (Latin letters, digits) into one word, which is [UNK] unless the whole run is in
the vocabulary. do_lower_case and strip_accents are off: a character vocabulary is cased.
"""
from __future__ import annotations

import json
from pathlib import Path

from glassformer.tokenizers.char import CharTokenizer
from glassformer.tokenizers.wordpiece import WordPieceTokenizer

CONFIG_FILE = "tokenizer_config.json"
BERT_SPECIALS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")   # as BERT's vocab.txt orders them


def vocab_line(piece: str, token_id: int) -> str:
    """A character as a vocab.txt line; one that is whitespace or unprintable (a line cannot hold
    it, and BERT's basic tokenizer never produces it) becomes [unused<id>]."""
    if piece.isspace() or not piece.isprintable():
        return f"[unused{token_id}]"
    return piece


def char_as_wordpiece(tokenizer: CharTokenizer) -> WordPieceTokenizer:
    """The same ids as a WordPiece vocabulary (cased, CJK split), for BERT's files."""
    specials = tokenizer.special_tokens
    vocab = {}
    for token_id in range(tokenizer.vocab_size):
        piece = tokenizer.id_to_piece(token_id)
        vocab[piece if piece in specials else vocab_line(piece, token_id)] = token_id
    return WordPieceTokenizer(vocab, lowercase=False, strip_accents=False)


def write_bert_tokenizer_config(folder: str | Path, tokenizer: WordPieceTokenizer,
                                max_length: int) -> Path:
    """tokenizer_config.json for BertTokenizerFast: casing, CJK splitting and the special tokens
    as this tokenizer has them (keys already in the file are kept unless set here)."""
    path = Path(folder) / CONFIG_FILE
    config = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
    lowercase = tokenizer.basic_options["lowercase"]
    config.update({"tokenizer_class": "BertTokenizer", "do_lower_case": lowercase,
                   "tokenize_chinese_chars": tokenizer.basic_options["split_chinese"],
                   "strip_accents": tokenizer.basic_options["strip_accents"],
                   "model_max_length": max_length, **tokenizer.special_names})
    path.write_text(json.dumps(config, ensure_ascii=False, indent=2) + "\n", encoding="utf-8")
    return path
