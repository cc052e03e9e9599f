"""`glassformer tokenizer train --data PATH --vocab-size N --out DIR`: learn a byte-level BPE."""
from __future__ import annotations

from pathlib import Path

from glassformer.errors import GlassformerError
from glassformer.tokenizers.bpe_train import train_bpe
from glassformer.tokenizers.pretokenize import NAMED_PRETOKENIZERS

NAME = "tokenizer"
HELP = "train a byte-level BPE tokenizer on a text file (saved as vocab.json + merges.txt)"
SHOWN_MERGES = 10  # how many of the first merges the summary prints


def add_arguments(parser) -> None:
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    train = actions.add_parser("train", help="learn merges from a UTF-8 text file",
                               description="learn byte-level BPE merges with the pair-count loop")
    train.add_argument("--data", required=True, metavar="PATH", help="UTF-8 text file to learn from")
    train.add_argument("--vocab-size", required=True, type=int, metavar="N",
                       help="ids in the result: 256 bytes + merges + special tokens")
    train.add_argument("--out", required=True, metavar="DIR",
                       help="folder for vocab.json, merges.txt and tokenizer.json")
    train.add_argument("--pattern", choices=list(NAMED_PRETOKENIZERS), default="gpt2",
                       help="pre-tokenizer regex (default: gpt2)")
    train.add_argument("--special", action="append", default=[], metavar="TOKEN",
                       help="a special token to reserve an id for (repeatable), e.g. <|endoftext|>")


def run(args) -> int:
    data = Path(args.data)
    if not data.is_file():
        raise GlassformerError(f"--data {data}: no such file")
    text = data.read_text(encoding="utf-8")
    tokenizer = train_bpe(text, args.vocab_size, pattern=args.pattern, special_tokens=args.special)
    written = tokenizer.save(args.out)
    ids = tokenizer.encode(text)
    print(f"trained on {data} ({len(text)} characters, {len(text.encode('utf-8'))} bytes)")
    print(f"{tokenizer.vocab_size} ids: 256 bytes + {len(tokenizer.merges)} merges + "
          f"{len(tokenizer.special_tokens)} special; pre-tokenizer {args.pattern}")
    first = [" + ".join(repr(part.decode("utf-8", "replace")) for part in pair)
             for pair in tokenizer.merges[:SHOWN_MERGES]]
    print(f"first merges: {'; '.join(first)}")
    print(f"the training text is {len(ids)} tokens "
          f"({len(text.encode('utf-8')) / max(len(ids), 1):.2f} bytes per token)")
    print(f"wrote {written.parent / 'vocab.json'}, merges.txt, tokenizer.json")
    return 0
