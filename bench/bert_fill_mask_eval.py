"""The Tang masked-LM recipe's judge: masked top-1 accuracy on held-out poems, through fill_mask.

Held-out poems are the validation split of `glassformer train --arch bert --objective mlm`: the
last 10% of the file by position (the first, partial line of it dropped). Each poem is cut to its
whole sentences (ending in 。？！) of at most --max-chars characters (64; fewer when the model's
position table cannot hold that many with [CLS] and [SEP]), and one Chinese character of it
(never punctuation) is replaced by [MASK], chosen by a seeded generator. The line is fed whole,
framed [CLS] line [SEP]; the model's top-1 (glassformer.fill_mask) is right when it is that
character.

Two baselines say what the figure means. The unigram baseline guesses the training split's most
frequent Chinese character everywhere; its entropy is the cross-entropy of the training split's
character frequencies (nats). The neighbour baseline counts, in the training split, which
Chinese character sits between each (left, right) pair of characters, after each left one and
before each right one, and guesses the commonest for the masked character's own neighbours:
the pair's when the training split has that pair, else the left neighbour's, else the right's,
else the unigram's (a line's first character has the newline to its left, as in the file).
With --hf N the model is exported (save_pretrained) and transformers' pipeline("fill-mask") on
the exported folder is asked the first N masked poems: its top-1 is compared with ours.
Famous lines not in the training split are filled at the end, ours beside transformers'.

    python -m bench.bert_fill_mask_eval --model RUN [--data ../shared/data/tang_poems.txt]
                                        [--poems N] [--max-chars 64] [--hf 200] [--seed 0]

Last line: one JSON object with top1, unigram_top1, neighbour_top1, unigram_nats, n, max_chars,
hf_agree, hf_n.
"""
from __future__ import annotations

import argparse
import json
import math
import tempfile
import time
import unicodedata
from collections import Counter
from pathlib import Path

import numpy as np

from glassformer.blas import blas_threads
from glassformer import inspect
from glassformer.explain.render import heatmap
from glassformer.io.pretrained import load_pretrained, save_pretrained
from glassformer.tasks.fill_mask import MASK, fill_mask, framed_ids

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "tang_poems.txt"
VAL_FRACTION = 0.1            # train/data.py's split: the last 10% of the ids (here, characters)
SENTENCE_ENDS = "。？！"
# Famous lines (Traditional, as the corpus) that the training split does not hold as written:
# checked again at run time and printed with the answer.
FAMOUS = ["床前明月[MASK]，疑是地上霜。",            # 李白《靜夜思》, the popular text (光)
          "舉頭望明[MASK]，低頭思故鄉。",            # the same (月)
          "清明時節雨紛紛，路上行人欲斷[MASK]。",    # 杜牧《清明》 (魂), not in 全唐詩
          "借問酒家何處有，牧童遙指杏花[MASK]。",    # the same (村)
          "兩岸猿聲啼不住，輕舟已過萬重[MASK]。",    # 李白《早發白帝城》, popular text (山)
          "本來無一物，何處惹塵[MASK]。",            # 慧能 (埃)
          "千里鶯啼綠映[MASK]，水村山郭酒旗風。",    # 杜牧《江南春》 (紅)
          "[MASK]是菩提樹，心如明鏡臺。"]            # 神秀 (身)
ANSWERS = ["光", "月", "魂", "村", "山", "埃", "紅", "身"]


def is_chinese(ch: str) -> bool:
    return unicodedata.category(ch) == "Lo"


def split(text: str) -> tuple[str, list[str]]:
    """(training text, held-out poems): the last 10% by position, its partial first line dropped."""
    n_train = int(len(text) * (1.0 - VAL_FRACTION))
    held_out = text[n_train:].split("\n")[1:]
    return text[:n_train], [poem for poem in held_out if poem]


def clip(poem: str, max_chars: int) -> str:
    """The poem's whole sentences that fit in max_chars ('' when even the first does not)."""
    cut = max((i + 1 for i, ch in enumerate(poem[:max_chars]) if ch in SENTENCE_ENDS), default=0)
    return poem[:cut]


def masked_examples(poems: list[str], max_chars: int, rng) -> list[tuple[str, str]]:
    """(text with one [MASK], the character it hides), one per poem that fits."""
    examples = []
    for poem in poems:
        part = clip(poem, max_chars)
        spots = [i for i, ch in enumerate(part) if is_chinese(ch)]
        if not spots:
            continue
        i = spots[int(rng.integers(len(spots)))]
        examples.append((part[:i] + MASK + part[i + 1:], part[i]))
    return examples


def neighbours(text: str) -> tuple[str, str]:
    """The characters left and right of the one [MASK] in text (a newline at either end)."""
    i = text.index(MASK)
    rest = text[i + len(MASK):]
    return (text[i - 1] if i else "\n"), (rest[0] if rest else "\n")


def commonest_between(codes: np.ndarray, keys: np.ndarray, wanted: set[int],
                      chinese: np.ndarray) -> dict[int, int]:
    """{key: the commonest Chinese middle code} for the wanted keys (one key per middle)."""
    keep = chinese & np.isin(keys, np.fromiter(wanted, np.int64, len(wanted)))
    best: dict[int, tuple[int, int]] = {}
    for (key, middle), count in Counter(zip(keys[keep].tolist(), codes[keep].tolist())).items():
        if count > best.get(key, (0, 0))[0]:
            best[key] = (count, middle)
    return {key: middle for key, (_, middle) in best.items()}


def neighbour_baseline(train: str, pairs: list[tuple[str, str]], fallback: str) -> list[str]:
    """The neighbour-counting guess for each (left, right) pair (module docstring), by code
    point over the training split: (left << 21) | right is a pair's key (code points < 2^21)."""
    codes = np.frombuffer(train.encode("utf-32-le"), dtype=np.uint32).astype(np.int64)
    seen = np.unique(codes)
    chinese = np.isin(codes, seen[[is_chinese(chr(c)) for c in seen.tolist()]])[1:-1]
    left, middle, right = codes[:-2], codes[1:-1], codes[2:]
    asked = [(ord(a), ord(b)) for a, b in pairs]
    by_pair = commonest_between(middle, (left << 21) | right, {(a << 21) | b for a, b in asked},
                                chinese)
    by_left = commonest_between(middle, left, {a for a, _ in asked}, chinese)
    by_right = commonest_between(middle, right, {b for _, b in asked}, chinese)
    guesses = []
    for a, b in asked:
        code = by_pair.get((a << 21) | b, by_left.get(a, by_right.get(b)))
        guesses.append(fallback if code is None else chr(code))
    return guesses


def unigram(train: str, only_chinese: bool) -> tuple[str, float, float]:
    """(most frequent character of the training text, its share, the unigram entropy in nats),
    over its Chinese characters or over every character."""
    counts = Counter(ch for ch in train if is_chinese(ch) or not only_chinese)
    total = sum(counts.values())
    entropy = -sum(c / total * math.log(c / total) for c in counts.values())
    common, count = counts.most_common(1)[0]
    return common, count / total, entropy


def attention_report(model, line: str) -> str:
    """How bidirectional the trained encoder is on one line: per layer, the share of attention
    weight each token puts on tokens to its right (a causal decoder's is exactly 0), and the
    last layer's head 0 as a heatmap (rows: queries [CLS] line [SEP]; columns: keys)."""
    result = inspect(model, framed_ids(model.tokenizer, line))
    lines = [f"attention on {line} ([CLS] ... [SEP], {len(line) + 2} tokens):"]
    for layer, weights in enumerate(result.attentions):                 # (1, H, T, T) each
        ahead = np.triu(weights[0], k=1).sum(axis=-1)                    # (H, T): mass to the right
        lines.append(f"  layer {layer}: weight on later tokens {ahead.mean():.1%} on average "
                     f"(per head: {' '.join(f'{v:.0%}' for v in ahead.mean(axis=-1))})")
    lines.append(f"  last layer, head 0 (row = query, column = key; {line}):")
    lines.append(heatmap(result.attentions[-1][0, 0], indent="    "))
    return "\n".join(lines)


def hf_top1(folder: Path, texts: list[str]) -> list[str]:
    """transformers' pipeline("fill-mask") top-1 on the exported folder."""
    import transformers
    fill = transformers.pipeline("fill-mask", model=str(folder), tokenizer=str(folder), top_k=1)
    return [fill(text)[0]["token_str"] for text in texts]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="a masked-LM run or BertForMaskedLM folder")
    parser.add_argument("--data", default=str(DATA), help="the recipe's data file")
    parser.add_argument("--poems", type=int, default=0, help="held-out poems to use (0: all)")
    parser.add_argument("--max-chars", type=int, default=64,
                        help="cut each held-out poem to its whole sentences of at most this many "
                             "characters (and what the position table holds)")
    parser.add_argument("--hf", type=int, default=0,
                        help="compare top-1 with transformers' pipeline on this many")
    parser.add_argument("--seed", type=int, default=0, help="seeds the masked positions")
    args = parser.parse_args()
    model = load_pretrained(args.model)
    train, poems = split(Path(args.data).read_text(encoding="utf-8"))
    if args.poems:
        poems = poems[:args.poems]
    max_chars = min(args.max_chars, model.cfg.max_seq_len - 2)   # [CLS] line [SEP] must fit
    examples = masked_examples(poems, max_chars, np.random.default_rng(args.seed))
    start = time.perf_counter()
    with blas_threads(1):   # one short sequence at a time: more threads only wait on each other
        guesses = [fill_mask(model, text, top_k=1)[0][0][0] for text, _ in examples]
    seconds = time.perf_counter() - start
    answers = [answer for _, answer in examples]
    top1 = float(np.mean([g == a for g, a in zip(guesses, answers)]))
    common, _, nats = unigram(train, only_chinese=True)
    any_common, any_share, any_nats = unigram(train, only_chinese=False)
    baseline = float(np.mean([a == common for a in answers]))
    counted = neighbour_baseline(train, [neighbours(text) for text, _ in examples], common)
    by_neighbours = float(np.mean([g == a for g, a in zip(counted, answers)]))
    print(f"held-out poems masked: {len(examples):,} (one Chinese character each; whole "
          f"sentences of at most {max_chars} characters, fed whole), {seconds:.1f} s")
    print(f"masked top-1 accuracy: {top1:.2%}   unigram baseline ({common!r} everywhere): "
          f"{baseline:.2%}, unigram entropy {nats:.2f} nats over Chinese characters "
          f"(over every character: {any_common!r} {any_share:.2%}, {any_nats:.2f} nats)")
    print(f"neighbour baseline (the training split's commonest character between the same "
          f"left and right neighbours, else after the left, else before the right): "
          f"{by_neighbours:.2%}")
    hf_agree, hf_n = None, 0
    with tempfile.TemporaryDirectory() as folder:
        famous_hf = None
        if args.hf:
            save_pretrained(model, folder)
            hf_n = min(args.hf, len(examples))
            theirs = hf_top1(Path(folder), [text for text, _ in examples[:hf_n]])
            # the newline and space tokens are [unusedN] in the exported vocab.txt: same id
            hf_agree = sum(t == g or (not g.strip() and t.startswith("[unused"))
                           for t, g in zip(theirs, guesses[:hf_n]))
            print(f"transformers' fill-mask pipeline on the export: the same top-1 on "
                  f"{hf_agree} of {hf_n}")
            famous_hf = hf_top1(Path(folder), FAMOUS)
        for k, (text, answer) in enumerate(zip(FAMOUS, ANSWERS)):
            line = text.replace(MASK, answer)
            where = ("IN the training split" if line in train
                     else "the line is not in the training split")
            with blas_threads(1):
                options = fill_mask(model, text, top_k=5)[0]
            shown = "  ".join(f"{token if token.strip() else repr(token)} {prob:.3f}"
                              for token, prob in options)
            hf_note = "" if famous_hf is None else f"  | transformers top-1: {famous_hf[k]}"
            print(f"{text} ({answer}; {where}): {shown}{hf_note}")
    print(attention_report(model, "床前明月光，疑是地上霜。"))
    print(json.dumps({"top1": top1, "unigram_top1": baseline, "neighbour_top1": by_neighbours,
                      "unigram_nats": nats, "n": len(examples), "max_chars": max_chars,
                      "hf_agree": hf_agree, "hf_n": hf_n}))


if __name__ == "__main__":
    main()
