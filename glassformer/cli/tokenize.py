"""`glassformer tokenize --tokenizer PATH "text"`: ids, pieces, readable text and bytes per token."""
from __future__ import annotations

import json
from pathlib import Path

from glassformer.errors import GlassformerError
from glassformer.tokenizers.display import describe, format_rows, token_rows
from glassformer.tokenizers.load import load_tokenizer

NAME = "tokenize"
HELP = "show how a tokenizer cuts text into ids: pieces, readable text and bytes per token"


def add_arguments(parser) -> None:
    parser.add_argument("text", nargs="?", default=None,
                        help="the text to tokenize (or use --file)")
    parser.add_argument("--tokenizer", required=True, metavar="PATH",
                        help="a tokenizer folder or file (tokenizer.json, vocab.json+merges.txt, "
                             "vocab.txt, .tiktoken, .gguf), or an installed name: gpt2, minilm, "
                             "smollm2")
    parser.add_argument("--file", metavar="PATH", default=None,
                        help="read the text from this UTF-8 file instead")
    parser.add_argument("--pattern", choices=["gpt2", "llama3", "smollm"], default=None,
                        help="override a byte-level BPE's pre-tokenizer regex")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object {ids, pieces, texts, bytes} instead of a table")


def run(args) -> int:
    if (args.text is None) == (args.file is None):
        raise GlassformerError("give the text to tokenize either as an argument or with --file")
    text = args.text if args.file is None else Path(args.file).read_text(encoding="utf-8")
    tokenizer = load_tokenizer(args.tokenizer, pattern=args.pattern)
    rows = token_rows(tokenizer, text)
    if args.json:
        print(json.dumps({"ids": [row.id for row in rows], "pieces": [row.piece for row in rows],
                          "texts": [row.text for row in rows],
                          "bytes": [row.hex_bytes for row in rows]}, ensure_ascii=False))
        return 0
    print(f"tokenizer: {args.tokenizer} ({describe(tokenizer)})")
    print(format_rows(rows))
    print(f"ids: {[row.id for row in rows]}")
    print(f"{len(rows)} tokens for {len(text)} characters ({len(text.encode('utf-8'))} bytes)")
    return 0
