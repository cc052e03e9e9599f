"""`glassformer tokenizer ACTION`: one command for tokenizers, with two actions.

    glassformer tokenizer encode --tokenizer gpt2 "Hello 汉字"         ids, pieces, text, bytes
    glassformer tokenizer train --data FILE --vocab-size N --out DIR   learn a byte-level BPE
    glassformer tokenizer train --kind wordpiece --data FILE ...        learn a BERT WordPiece

Why one command with actions rather than `tokenize` beside `tokenizer train`: both act on a
tokenizer (use one, make one), and two top-level names one letter apart read as the same thing.
`train` writes vocab.json + merges.txt + tokenizer.json (a WordPiece: vocab.txt + tokenizer.json +
tokenizer_config.json, which transformers' BertTokenizerFast also reads); `encode --tokenizer DIR`
reads either.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tqdm import tqdm

from glassformer.cli.common import add_seed_argument
from glassformer.errors import GlassformerError
from glassformer.packaged import TOKENIZER, data_help, data_path, packaged_names
from glassformer.tokenizers.bpe_train import train_bpe
from glassformer.tokenizers.display import (describe, format_rows, readable_merge, token_rows,
                                            typed_specials)
from glassformer.tokenizers.load import load_tokenizer
from glassformer.tokenizers.pretokenize import NAMED_PRETOKENIZERS
from glassformer.tokenizers.wordpiece_train import BERT_SPECIALS, train_wordpiece, write_bert_config

NAME = "tokenizer"
HELP = ("use or make a tokenizer: `encode` shows how one cuts text into ids, `train` learns a "
        "byte-level BPE or a BERT WordPiece from a text file")
SHOWN_MERGES = 10  # how many of the first merges the train summary prints
# The train summary's bytes per token are measured on this much of the text: encoding all of a
# 9 MB corpus would take as long again as the training.
MEASURED_CHARACTERS = 200_000


def add_arguments(parser) -> None:
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True,
                                    help="encode (use a tokenizer) or train (make one)")
    encode = actions.add_parser(
        "encode", help="show how a tokenizer cuts text into ids: pieces, readable text and bytes "
                       "per token", description="show how a tokenizer cuts text into ids")
    add_seed_argument(encode, default=argparse.SUPPRESS)
    encode.add_argument("text", nargs="?", default=None,
                        help="the text to tokenize (or use --file)")
    encode.add_argument("--tokenizer", required=True, metavar="PATH",
                        help="a tokenizer folder or file (tokenizer.json, vocab.json+merges.txt, "
                             "vocab.txt, .tiktoken, .gguf), or an installed name: "
                             + ", ".join(packaged_names(TOKENIZER)))
    encode.add_argument("--file", metavar="PATH", default=None,
                        help="read the text from this UTF-8 file instead")
    encode.add_argument("--pattern", choices=list(NAMED_PRETOKENIZERS), default=None,
                        help="override a byte-level BPE's pre-tokenizer regex")
    encode.add_argument("--allow-special", action="store_true",
                        help="read special-token strings typed in the text (<|endoftext|>, [SEP]) "
                             "as control tokens; by default they are plain text")
    encode.add_argument("--json", action="store_true",
                        help="print one JSON object {ids, pieces, texts, bytes, control} instead "
                             "of a table")

    add_train_arguments(actions)


def add_train_arguments(actions) -> None:
    train = actions.add_parser("train", help="learn a byte-level BPE or a BERT WordPiece "
                                             "vocabulary from a UTF-8 text file",
                               description="learn byte-level BPE merges or a WordPiece vocabulary "
                                           "with the pair-count loop")
    add_seed_argument(train, default=argparse.SUPPRESS)
    train.add_argument("--kind", choices=("bpe", "wordpiece"), default="bpe",
                       help="bpe: GPT-2 style byte-level BPE (default); wordpiece: BERT's, with "
                            "[PAD] [UNK] [CLS] [SEP] [MASK] as ids 0-4 and '##' continuing pieces")
    train.add_argument("--data", required=True, metavar="PATH", type=data_path,
                       help=data_help("UTF-8 text file to learn from"))
    train.add_argument("--vocab-size", required=True, type=int, metavar="N",
                       help="ids in the result: special tokens + alphabet (256 bytes for bpe) "
                            "+ merges")
    train.add_argument("--out", required=True, metavar="DIR",
                       help="folder for vocab.json, merges.txt and tokenizer.json (wordpiece: "
                            "vocab.txt, tokenizer.json and tokenizer_config.json)")
    train.add_argument("--pattern", choices=list(NAMED_PRETOKENIZERS), default=None,
                       help="bpe: pre-tokenizer regex (default: gpt2)")
    train.add_argument("--special", action="append", default=[], metavar="TOKEN",
                       help="bpe: a special token to reserve an id for (repeatable), e.g. "
                            "<|endoftext|> (wordpiece always has BERT's five)")
    train.add_argument("--cased", action="store_true",
                       help="wordpiece: keep case and accents (default: lower-case and strip "
                            "accents, as uncased BERT)")
    train.add_argument("--min-frequency", type=int, default=0, metavar="N",
                       help="wordpiece: stop when the most frequent pair occurs fewer than N times")
    train.add_argument("--limit-alphabet", type=int, default=None, metavar="N",
                       help="wordpiece: keep only the N most frequent characters (the rest "
                            "become [UNK]); default: all")


def run(args) -> int:
    if args.action == "encode":
        return run_encode(args)
    return run_train(args)


def run_encode(args) -> int:
    if (args.text is None) == (args.file is None):
        raise GlassformerError("give the text to tokenize either as an argument or with --file")
    text = args.text if args.file is None else Path(args.file).read_text(encoding="utf-8")
    tokenizer = load_tokenizer(args.tokenizer, pattern=args.pattern)
    rows = token_rows(tokenizer, text, "all" if args.allow_special else ())
    if args.json:
        print(json.dumps({"ids": [row.id for row in rows], "pieces": [row.piece for row in rows],
                          "texts": [row.text for row in rows],
                          "bytes": [row.hex_bytes for row in rows],
                          "control": [row.control for row in rows]}, ensure_ascii=False))
        return 0
    print(f"tokenizer: {args.tokenizer} ({describe(tokenizer)})")
    print(format_rows(rows))
    print(f"ids: {[row.id for row in rows]}")
    n_control = sum(row.control for row in rows)
    print(f"{len(rows)} tokens ({n_control} control) for {len(text)} characters "
          f"({len(text.encode('utf-8'))} bytes)")
    typed = typed_specials(tokenizer, text)
    if typed and not args.allow_special:
        print(f"the text spells {', '.join(typed)}, read as plain text; --allow-special reads "
              "special-token strings as control tokens")
    return 0


def read_training_text(path: str) -> tuple[Path, str]:
    """The --data file's text, or one line saying why it cannot be trained on."""
    data = Path(path)
    if not data.is_file():
        raise GlassformerError(f"--data {data}: no such file")
    try:
        text = data.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise GlassformerError(f"--data {data} is not UTF-8 text: {err.reason} at byte "
                               f"{err.start}") from None
    if not text:
        raise GlassformerError(f"--data {data} is empty: there is nothing to learn a vocabulary "
                               "from")
    return data, text


def run_train(args) -> int:
    if args.kind == "wordpiece":
        return run_train_wordpiece(args)
    for flag, value in (("--cased", args.cased), ("--min-frequency", args.min_frequency),
                        ("--limit-alphabet", args.limit_alphabet)):
        if value:
            raise GlassformerError(f"{flag} is for --kind wordpiece; a byte-level BPE has no "
                                   "such setting")
    args.pattern = args.pattern or "gpt2"
    data, text = read_training_text(args.data)
    n_merges = args.vocab_size - 256 - len(args.special)
    # A bar on a terminal only (disable=None); stderr, so stdout keeps the summary alone.
    with tqdm(total=max(n_merges, 0), desc="merges", unit="merge", disable=None,
              file=sys.stderr, dynamic_ncols=True) as bar:
        tokenizer = train_bpe(text, args.vocab_size, pattern=args.pattern,
                              special_tokens=args.special, on_merge=bar.update)
    written = tokenizer.save(args.out)
    n_bytes = len(text.encode("utf-8"))
    print(f"trained on {data} ({len(text)} characters, {n_bytes} bytes)")
    print(f"{tokenizer.vocab_size} ids: 256 bytes + {len(tokenizer.merges)} merges + "
          f"{len(tokenizer.special_tokens)} special; pre-tokenizer {args.pattern}")
    first = [readable_merge(left, right) for left, right in tokenizer.merges[:SHOWN_MERGES]]
    print(f"first merges: {'; '.join(first)}")
    sample = text[:MEASURED_CHARACTERS]
    sample_bytes = len(sample.encode("utf-8"))
    ids = tokenizer.encode(sample)
    print(f"{sample_bytes / max(len(ids), 1):.2f} bytes per token on the first {len(sample)} "
          f"characters of the training text")
    print(f"wrote {written.parent / 'vocab.json'}, merges.txt, tokenizer.json")
    return 0


def run_train_wordpiece(args) -> int:
    if args.pattern is not None:
        raise GlassformerError("--pattern is for --kind bpe; WordPiece splits words with BERT's "
                               "basic tokenizer")
    if args.special:
        raise GlassformerError("--special is for --kind bpe; a WordPiece vocabulary has BERT's "
                               "[PAD] [UNK] [CLS] [SEP] [MASK]")
    if args.min_frequency < 0:
        raise GlassformerError(f"--min-frequency must be 0 or more, got {args.min_frequency}")
    data, text = read_training_text(args.data)
    # A bar on a terminal only; the number of merges is known only once the alphabet is.
    with tqdm(desc="merges", unit="merge", disable=None, file=sys.stderr,
              dynamic_ncols=True) as bar:
        tokenizer = train_wordpiece(text, args.vocab_size, lowercase=not args.cased,
                                    min_frequency=args.min_frequency,
                                    limit_alphabet=args.limit_alphabet, on_merge=bar.update)
    written = tokenizer.save(args.out)
    write_bert_config(args.out, tokenizer)
    pieces = [token for token in tokenizer.vocab if token not in tokenizer.special_tokens]
    n_chars = sum(len(token) == 1 for token in pieces)
    n_continuing = sum(token.startswith("##") and len(token) == 3 for token in pieces)
    print(f"trained on {data} ({len(text)} characters)")
    print(f"{tokenizer.vocab_size} ids: {len(BERT_SPECIALS)} special + {n_chars} characters + "
          f"{n_continuing} '##' characters + {len(pieces) - n_chars - n_continuing} merged pieces"
          f" ({'cased' if args.cased else 'uncased'})")
    merged = [token for token in pieces if len(token.removeprefix("##")) > 1]
    print(f"first merged pieces: {' '.join(merged[:SHOWN_MERGES])}" if merged else
          "no merged pieces: no pair of characters inside a word occurs often enough (BERT "
          "makes each CJK character a word of its own)")
    sample = text[:MEASURED_CHARACTERS]
    n_ids = len(tokenizer.encode(sample, add_special_tokens=False))
    print(f"{len(sample) / max(n_ids, 1):.2f} characters per token on the first {len(sample)} "
          f"characters of the training text")
    print(f"wrote {written.parent / 'vocab.txt'}, tokenizer.json, tokenizer_config.json")
    return 0
