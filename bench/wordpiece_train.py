"""WordPiece training speed: glassformer's trainer against HF `tokenizers`' WordPieceTrainer.

Both learn an uncased BERT vocabulary ([PAD] [UNK] [CLS] [SEP] [MASK], BERT's normalizer and
pre-tokenizer, '##' continuing pieces) of the same size from the same file, in this process, in
alternating rounds (ours, HF, ours, HF, ...) so that machine noise hits both; each time includes
reading the file. The table gives the median of --repeats rounds, ours split into its two stages
(counting the words with BERT's basic tokenizer, then the merge loop).

It also compares the vocabularies: ours against each HF round (tokens shared), HF's rounds against
each other (HF numbers the '##' characters in hash-map order, so its tie-breaks change from run to
run), and ours given HF's numbering of the '##' characters, which must be HF's vocabulary exactly.

HF's trainer uses every core (RAYON_NUM_THREADS, or --hf-threads, limits it); ours uses one.

    python bench/wordpiece_train.py [--data FILE] [--vocab-size 8000] [--repeats 5] [--hf-threads N]

Default data: ../shared/data/tinyshakespeare.txt. Last line: one JSON object with `ratio`
(our median time / HF's).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

from glassformer.tokenizers.wordpiece_train import (BERT_SPECIALS, count_words, learn_vocab,
                                                    train_wordpiece)

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def train_ours(path: Path, vocab_size: int) -> tuple[list[str], float, float]:
    """(tokens in id order, seconds counting words, seconds merging) for our trainer."""
    start = time.perf_counter()
    text = path.read_text(encoding="utf-8")
    word_counts = count_words(text)
    counted = time.perf_counter()
    tokens = learn_vocab(word_counts, vocab_size)
    return tokens, counted - start, time.perf_counter() - counted


def train_hf(path: Path, vocab_size: int) -> list[str]:
    """HF's WordPieceTrainer on the file, as BERT's tokenizer is trained; tokens in id order."""
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, show_progress=False,
                                        special_tokens=list(BERT_SPECIALS))
    tokenizer.train([str(path)], trainer)
    vocab = tokenizer.get_vocab()
    return sorted(vocab, key=vocab.get)


def shared(a: list[str], b: list[str]) -> int:
    return len(set(a) & set(b))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(DATA / "tinyshakespeare.txt"),
                        help="UTF-8 text file to train on (default: Tiny Shakespeare)")
    parser.add_argument("--vocab-size", type=int, default=8000, help="ids (default: 8000)")
    parser.add_argument("--repeats", type=int, default=5, help="timed rounds each (default: 5)")
    parser.add_argument("--hf-threads", type=int, default=None,
                        help="threads for HF's trainer (default: every core)")
    args = parser.parse_args()
    path = Path(args.data)
    if not path.is_file():
        print(f"error: {path} not found", file=sys.stderr)
        return 2
    if args.hf_threads is not None:
        os.environ["RAYON_NUM_THREADS"] = str(args.hf_threads)  # read when HF's pool starts
    train_wordpiece("warm up the imports", 100)
    ours_times, count_times, merge_times, hf_times, ours_runs, hf_runs = [], [], [], [], [], []
    for _ in range(args.repeats):
        start = time.perf_counter()
        tokens, counting, merging = train_ours(path, args.vocab_size)
        ours_times.append(time.perf_counter() - start)
        count_times.append(counting)
        merge_times.append(merging)
        ours_runs.append(tokens)
        start = time.perf_counter()
        hf_runs.append(train_hf(path, args.vocab_size))
        hf_times.append(time.perf_counter() - start)
    ours_s, hf_s = statistics.median(ours_times), statistics.median(hf_times)
    ratio = ours_s / hf_s
    threads = os.environ.get("RAYON_NUM_THREADS", f"all {os.cpu_count()}")
    print(f"{path.name} ({path.stat().st_size / 1e6:.2f} MB), vocab {args.vocab_size}, "
          f"median of {args.repeats} alternating rounds (machine load: {os.getloadavg()[0]:.1f})")
    print(f"  glassformer   {ours_s:7.3f} s   (count words {statistics.median(count_times):.3f} s, "
          f"merges {statistics.median(merge_times):.3f} s; one thread)")
    print(f"  HF tokenizers {hf_s:7.3f} s   (threads: {threads})")
    print(f"  ratio         {ratio:7.2f}x HF's time")

    ours = ours_runs[0]
    assert all(run == ours for run in ours_runs), "our trainer is not deterministic"
    word_counts = count_words(path.read_text(encoding="utf-8"))
    reproduced = []
    for run in hf_runs:
        order = tuple(token for token in run if token.startswith("##") and len(token) == 3)
        reproduced.append(learn_vocab(word_counts, args.vocab_size, continuing_order=order) == run)
    with_hf = [shared(ours, run) for run in hf_runs]
    hf_pairs = [shared(a, b) for k, a in enumerate(hf_runs) for b in hf_runs[k + 1:]]
    print(f"vocabulary ({len(ours)} ids): ours shares {min(with_hf)}-{max(with_hf)} tokens with "
          f"HF's rounds; HF's rounds share {min(hf_pairs, default=len(ours))}-"
          f"{max(hf_pairs, default=len(ours))} with each other; given HF's '##' numbering ours "
          f"equals HF's vocabulary in {sum(reproduced)}/{len(hf_runs)} rounds")
    print(json.dumps({"data": path.name, "vocab_size": args.vocab_size, "repeats": args.repeats,
                      "ours_s": round(ours_s, 4), "hf_s": round(hf_s, 4),
                      "ratio": round(ratio, 3), "hf_threads": threads,
                      "shared_with_hf": [min(with_hf), max(with_hf)],
                      "hf_shared_with_hf": [min(hf_pairs, default=len(ours)),
                                            max(hf_pairs, default=len(ours))],
                      "reproduced_exactly": f"{sum(reproduced)}/{len(hf_runs)}",
                      "load": round(os.getloadavg()[0], 1)}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
