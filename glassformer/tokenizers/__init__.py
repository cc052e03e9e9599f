"""Tokenizers written from scratch: characters, byte-level BPE (GPT-2, SmolLM2, tiktoken files) and
BERT's WordPiece. Each module is importable on its own; `glassformer.load_tokenizer(path)` reads any
of the supported file layouts. See docs/tokenizers.md.

    base.py             the shared interface (encode, decode, vocab_size, special_tokens, save/load)
    char.py             one id per character of a corpus
    bytelevel.py        GPT-2's byte <-> printable-character table; readable views of byte tokens
    pretokenize.py      the pre-tokenizer regexes (gpt2, llama3, smollm)
    bpe.py              byte-level BPE encode/decode (merges applied by rank, per-word cache);
                        reads tokenizer.json and vocab.json + merges.txt
    bpe_train.py        learning merges from text (the pair-count loop)
    bpe_files.py        .tiktoken and GGUF readers
    hf_json.py          the parts of HF's tokenizer.json we read and write
    wordpiece_basic.py  BERT's basic tokenizer (clean, lower-case, accents, punctuation, CJK)
    wordpiece.py        greedy longest-match-first WordPiece, pairs, padding, truncation
    wordpiece_train.py  learning a WordPiece vocabulary (HF WordPieceTrainer's merge loop)
    load.py             recognise a folder or file and build the right tokenizer
    display.py          per-token rows (id, piece, text, bytes) for `glassformer tokenizer encode`
    chat_template.py    chat templates: a conversation rendered (Jinja2's sandbox) and tokenized as
                        the model was trained, control tokens by id, typed ones as text
    template_budget.py  the size and time limits of a template's render
    end_of_text.py      which specials end a text or a turn (generation stops on them)
"""
