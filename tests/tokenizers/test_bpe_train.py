"""BPE training: a hand-worked example with pinned merges and ids, round trips, save/load identity.

The example, worked by hand (GPT-2 pre-tokenizer, so words carry their leading space):

    words: "hug" x1, " hug" x2, " pug" x1, " pun" x1, " bun" x1, " hugs" x1
    pair counts: (u,g) 5, (h,u) 4, (' ',h) 3, (' ',p) 2, (p,u) 2, (u,n) 2, ...
    merge 0: u + g      -> "ug"    id 256   (count 5)
    merge 1: h + ug     -> "hug"   id 257   (count 4: hug, 2x hug, hugs)
    merge 2: ' ' + hug  -> " hug"  id 258   (count 3)
    merge 3: ' ' + p    -> " p"    id 259   (count 2, ties with (u,n): b" " sorts before b"u")
    merge 4: u + n      -> "un"    id 260   (count 2)
    merge 5: ' ' + b    -> " b"    id 261   (all remaining pairs have count 1; b" " sorts first)
    merge 6: " b" + un  -> " bun"  id 262   (b" b" < b" hug" < b" p")
    merge 7: " hug" + s -> " hugs" id 263
    merge 8: " p" + ug  -> " pug"  id 264   (b"ug" < b"un")
    merge 9: " p" + un  -> " pun"  id 265   then no pair is left: training stops at 266 ids
"""
import json

import pytest

from glassformer.errors import GlassformerError
from glassformer.tokenizers.bpe import BPETokenizer
from glassformer.tokenizers.bpe_train import train_bpe

HAND_TEXT = "hug hug hug pug pun bun hugs"
HAND_MERGES = [(b"u", b"g"), (b"h", b"ug"), (b" ", b"hug"), (b" ", b"p"), (b"u", b"n"),
               (b" ", b"b"), (b" b", b"un"), (b" hug", b"s"), (b" p", b"ug"), (b" p", b"un")]


def test_hand_worked_example_merges_and_ids():
    tok = train_bpe(HAND_TEXT, vocab_size=1000)
    assert tok.merges == HAND_MERGES
    assert tok.vocab_size == 266  # stopped early: nothing left to merge
    assert tok.encode("hug pug bun") == [257, 264, 262]
    assert tok.encode(" hugs pun") == [263, 265]
    # "hugs" without a space: (hug, s) was never learned, only (" hug", s)
    assert tok.encode("hugs") == [257, ord("s")]


def test_vocab_size_bounds_the_number_of_merges():
    tok = train_bpe(HAND_TEXT, vocab_size=262)
    assert tok.merges == HAND_MERGES[:6]
    assert tok.vocab_size == 262


def test_special_tokens_take_the_last_ids():
    tok = train_bpe(HAND_TEXT, vocab_size=260, special_tokens=["<|endoftext|>"])
    assert tok.special_tokens == {"<|endoftext|>": 259}
    assert len(tok.merges) == 3
    assert tok.encode("hug<|endoftext|>", allowed_special="all") == [257, 259]
    assert 259 not in tok.encode("hug<|endoftext|>")   # typed, it is text


def test_vocab_size_below_bytes_plus_specials_is_an_error():
    with pytest.raises(GlassformerError, match="at least 256"):
        train_bpe(HAND_TEXT, vocab_size=256, special_tokens=["<s>"])


@pytest.mark.parametrize("pattern", ["gpt2", "llama3", "smollm"])
def test_trained_tokenizer_round_trips(tiny_shakespeare, pattern):
    text = tiny_shakespeare[:30_000]
    tok = train_bpe(text, vocab_size=400, pattern=pattern)
    sample = tiny_shakespeare[30_000:32_000] + " 汉字 🙂 1234"
    ids = tok.encode(sample)
    assert len(ids) < len(sample.encode("utf-8"))   # merges actually compress
    assert tok.decode(ids) == sample


def test_save_load_identity(tmp_path, tiny_shakespeare):
    tok = train_bpe(tiny_shakespeare[:20_000], vocab_size=350, pattern="llama3",
                    special_tokens=["<|endoftext|>"])
    tok.save(tmp_path)
    assert {p.name for p in tmp_path.iterdir()} == {"vocab.json", "merges.txt", "tokenizer.json"}
    again = BPETokenizer.load(tmp_path)
    assert again.merges == tok.merges
    assert again.vocab == tok.vocab
    assert again.special_tokens == tok.special_tokens
    assert again.pretokenizer.name == "llama3"
    text = tiny_shakespeare[20_000:22_000] + "<|endoftext|>" + "x = 12345\n"
    assert again.encode(text) == tok.encode(text)


def test_vocab_json_and_merges_txt_alone_reload_identically(tmp_path, tiny_shakespeare):
    tok = train_bpe(tiny_shakespeare[:20_000], vocab_size=350, special_tokens=["<|endoftext|>"])
    tok.save(tmp_path)
    (tmp_path / "tokenizer.json").unlink()
    again = BPETokenizer.load(tmp_path)
    assert again.merges == tok.merges and again.vocab == tok.vocab
    assert again.special_tokens == tok.special_tokens   # <|...|> tokens of vocab.json are special
    text = tiny_shakespeare[20_000:22_000] + "<|endoftext|>"
    assert again.encode(text) == tok.encode(text)


def test_saved_vocab_and_merges_are_gpt2_layout(tmp_path):
    train_bpe(HAND_TEXT, vocab_size=262).save(tmp_path)
    vocab = json.loads((tmp_path / "vocab.json").read_text(encoding="utf-8"))
    merges = (tmp_path / "merges.txt").read_text(encoding="utf-8").splitlines()
    assert vocab["Ġ"] == 32          # single-byte tokens keep their byte value as id
    assert vocab["Ġhug"] == 258
    assert merges == ["#version: 0.2", "u g", "h ug", "Ġ hug", "Ġ p", "u n", "Ġ b"]


@pytest.mark.parametrize("pattern", ["gpt2", "llama3", "smollm"])
def test_saved_tokenizer_json_loads_in_hf_tokenizers(tmp_path, tiny_shakespeare, pattern):
    hf_tokenizers = pytest.importorskip("tokenizers")
    tok = train_bpe(tiny_shakespeare[:20_000], vocab_size=400, pattern=pattern,
                    special_tokens=["<|endoftext|>"])
    reference = hf_tokenizers.Tokenizer.from_file(str(tok.save(tmp_path)))
    text = tiny_shakespeare[20_000:24_000] + "<|endoftext|>汉字  1234 🙂\n\n  x"
    assert reference.encode(text).ids == tok.encode(text, allowed_special="all")


def recounting_merges(text: str, n_merges: int) -> list[tuple[bytes, bytes]]:
    """The textbook loop the incremental counts must reproduce: recount every pair each merge."""
    from collections import Counter

    from glassformer.tokenizers.pretokenize import PreTokenizer

    word_counts = Counter(PreTokenizer.named("gpt2").split(text))
    words = [[bytes([byte]) for byte in word.encode("utf-8")] for word in word_counts]
    freqs = list(word_counts.values())
    merges = []
    for _ in range(n_merges):
        counts: Counter = Counter()
        for parts, freq in zip(words, freqs):
            for pair in zip(parts, parts[1:]):
                counts[pair] += freq
        if not counts:
            break
        best = min(counts, key=lambda pair: (-counts[pair], pair))  # most frequent, then bytes
        merges.append(best)
        for index, parts in enumerate(words):
            merged, i = [], 0
            while i < len(parts):
                if parts[i:i + 2] == list(best):
                    merged.append(best[0] + best[1])
                    i += 2
                else:
                    merged.append(parts[i])
                    i += 1
            words[index] = merged
    return merges


@pytest.mark.parametrize("source", ["shakespeare", "tang", "runs"])
def test_incremental_counts_give_the_recounting_loops_merges(source, tiny_shakespeare, tang_poems):
    texts = {"shakespeare": tiny_shakespeare[:6_000], "tang": tang_poems[:3_000],
             "runs": "aaaaaaa aaaa aaaaaaaaaaaaa bab abab ababab aaab " * 3}
    text = texts[source]
    assert train_bpe(text, vocab_size=256 + 120).merges == recounting_merges(text, 120)


def test_an_empty_text_is_an_error():
    with pytest.raises(GlassformerError, match="empty"):
        train_bpe("", vocab_size=300)


def test_progress_callback_runs_once_per_merge():
    calls = []
    tok = train_bpe(HAND_TEXT, vocab_size=1000, on_merge=lambda: calls.append(1))
    assert len(calls) == len(tok.merges) == len(HAND_MERGES)


def test_cli_prints_merges_readably_and_refuses_an_empty_file(tmp_path, capsys):
    from glassformer.cli import main

    data = tmp_path / "poem.txt"
    data.write_text("汉字汉字 汉字\n" * 20, encoding="utf-8")
    assert main(["tokenizer", "train", "--data", str(data), "--vocab-size", "270",
                 "--out", str(tmp_path / "tok")]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""   # no progress bar when stderr is not a terminal
    out = captured.out
    assert "first merges: " in out and "\ufffd" not in out
    # ties go to the lowest bytes, so the characters' inner bytes merge first; hex until whole
    assert ('first merges: 89 + e5; 89 e5 + ad; 89 e5 ad + 97; b1 + 89 e5 ad 97; '
            'e6 + b1 89 e5 ad 97 = "汉字"; " " + "汉字"; "汉字" + "汉字"') in out
    empty = tmp_path / "empty.txt"
    empty.write_text("", encoding="utf-8")
    assert main(["tokenizer", "train", "--data", str(empty), "--vocab-size", "300",
                 "--out", str(tmp_path / "none")]) == 2
    err = capsys.readouterr().err
    assert "is empty" in err and err.count("\n") == 1
    assert not (tmp_path / "none").exists()


def test_cli_shows_a_progress_bar_on_a_terminal(tmp_path):
    pty = pytest.importorskip("pty")
    import fcntl
    import os
    import struct
    import subprocess
    import sys
    import termios

    data = tmp_path / "text.txt"
    data.write_text(HAND_TEXT * 10, encoding="utf-8")
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # 100 columns
    child = subprocess.Popen([sys.executable, "-m", "glassformer", "tokenizer", "train", "--data",
                              str(data), "--vocab-size", "266", "--out", str(tmp_path / "tok")],
                             stdin=follower, stdout=follower, stderr=follower)
    os.close(follower)
    shown = b""
    while True:
        try:
            chunk = os.read(leader, 4096)
        except OSError:  # the child closed the terminal
            break
        if not chunk:
            break
        shown += chunk
    os.close(leader)
    assert child.wait(timeout=60) == 0
    text = shown.decode("utf-8", errors="replace")
    assert "merges: 100%" in text and "10/10" in text
