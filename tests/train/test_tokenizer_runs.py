"""`glassformer train --tokenizer` (issue 22): a BPE-level run generates through its tokenizer,
resumes exactly, exports with its tokenizer, reports bits per byte; bad input is one line."""
import json
import math
from pathlib import Path

import numpy as np
import pytest

from glassformer.cli import main
from glassformer.generate.generate import generate
from glassformer.io.checkpoint import load_checkpoint, read_train_log
from glassformer.io.pretrained import load_pretrained, save_pretrained
from glassformer.ops.cross_entropy import cross_entropy_forward
from glassformer.tokenizers.bpe_train import train_bpe
from glassformer.tokenizers.load import load_tokenizer
from glassformer.train import data as data_module
from glassformer.train.data import encode_text, safe_pieces

SHAKESPEARE = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "tinyshakespeare.txt"
TINY = ["--n-layer", "1", "--n-head", "2", "--d-model", "16", "--block-size", "16",
        "--batch-size", "4", "--eval-iters", "1", "--no-progress", "--workers", "1"]
BPE_VOCAB = 300  # 256 bytes + 44 merges: the model's vocab is padded to 320


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    if not SHAKESPEARE.is_file():
        pytest.skip(f"corpus {SHAKESPEARE} is absent")
    root = tmp_path_factory.mktemp("bpe")
    corpus = root / "corpus.txt"
    corpus.write_text(SHAKESPEARE.read_text(encoding="utf-8")[:20_000], encoding="utf-8")
    train_bpe(corpus.read_text(encoding="utf-8"), BPE_VOCAB).save(root / "tok")
    out = root / "run"
    assert main(["train", "--data", str(corpus), "--out", str(out), "--tokenizer",
                 str(root / "tok"), *TINY, "--max-iters", "4", "--eval-interval", "2"]) == 0
    return root, corpus, out


def test_the_model_vocab_is_the_tokenizers_padded_to_64(setup):
    root, _, out = setup
    model = load_pretrained(out)
    assert model.cfg.vocab_size == 320 and model.tokenizer.vocab_size == BPE_VOCAB
    assert json.loads((out / "tokenizer" / "tokenizer.json").read_text(encoding="utf-8")) == \
        load_checkpoint(out).tokenizer_json


def test_generation_never_samples_padding_and_decodes_through_the_bpe(setup, capsys):
    root, _, out = setup
    model = load_pretrained(out)
    # an untrained head favouring the padding ids: they must still never come out
    logits_bias = np.zeros(model.cfg.vocab_size, np.float32)
    logits_bias[BPE_VOCAB:] = 50.0
    forward = model.forward
    model.forward = lambda *a, **k: (lambda r: (r[0] + logits_bias, r[1]))(forward(*a, **k))
    prompt = np.array([model.tokenizer.encode("ROMEO:")])
    ids = [int(step[0]) for step in generate(model, prompt, max_new_tokens=12, seed=1)]
    assert max(ids) < BPE_VOCAB
    assert main(["generate", "--model", str(out), "--max-new-tokens", "8", "--seed", "2",
                 "ROMEO:"]) == 0
    text = capsys.readouterr().out.rstrip("\n")
    tokenizer = load_tokenizer(root / "tok")
    steps = generate(load_pretrained(out), prompt, max_new_tokens=8, seed=2,
                     temperature=0.8)   # the command's default temperature
    assert text == tokenizer.decode([int(step[0]) for step in steps])


def test_resume_is_exact(setup, tmp_path):
    root, corpus, straight = setup
    split = tmp_path / "split"
    assert main(["train", "--data", str(corpus), "--out", str(split), "--tokenizer",
                 str(root / "tok"), *TINY, "--max-iters", "2", "--eval-interval", "2"]) == 0
    assert main(["train", "--out", str(split), "--resume", "--tokenizer", str(root / "tok"),
                 "--max-iters", "4"]) == 0
    losses = [{r["iter"]: r.get("train_loss") for r in read_train_log(run)}
              for run in (split, straight)]
    assert losses[0] == losses[1]
    a, b = load_checkpoint(split).params, load_checkpoint(straight).params
    assert all(np.array_equal(a[key], b[key]) for key in b)


def test_train_log_records_val_bits_per_byte(setup):
    root, corpus, out = setup
    tokenizer = load_tokenizer(root / "tok")
    ids = tokenizer.encode(corpus.read_text(encoding="utf-8"))
    val = ids[int(len(ids) * 0.9):]
    n_bytes = len(tokenizer.decode(val).encode("utf-8"))
    for record in (r for r in read_train_log(out) if "val_loss" in r):
        assert record["val_bpb"] == pytest.approx(
            record["val_loss"] * len(val) / math.log(2) / n_bytes, rel=1e-9)


def test_export_loads_in_transformers_with_the_same_ids_and_logits(setup, tmp_path):
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    _, corpus, out = setup
    model = load_pretrained(out)
    folder = save_pretrained(model, tmp_path / "hf")
    assert {"tokenizer.json", "vocab.json", "merges.txt"} <= {p.name for p in folder.iterdir()}
    text = corpus.read_text(encoding="utf-8")[:300]
    theirs = transformers.AutoTokenizer.from_pretrained(str(folder))
    assert theirs(text)["input_ids"] == model.tokenizer.encode(text)
    ids = np.array([model.tokenizer.encode(text)[:16]])
    hf = transformers.AutoModelForCausalLM.from_pretrained(str(folder)).eval()
    with torch.no_grad():
        hf_logits = hf(torch.from_numpy(ids)).logits.numpy()
    np.testing.assert_allclose(model(ids), hf_logits, atol=1e-5)
    np.testing.assert_allclose(load_pretrained(folder)(ids), model(ids), atol=1e-6)


def bits_per_byte_by_hand(model, text: str, block: int = 16) -> float:
    """total nats / ln 2 / UTF-8 bytes of the scored text, over the val split's windows."""
    ids = np.array(model.tokenizer.encode(text))
    ids = ids[int(len(ids) * 0.9):]
    n = (len(ids) - 1) // block
    logits = model(ids[:n * block].reshape(n, block))
    targets = ids[1:n * block + 1]
    loss, _ = cross_entropy_forward(logits, targets.reshape(n, block))
    scored = model.tokenizer.decode(targets.tolist()).encode("utf-8")
    return float(loss) * targets.size / math.log(2) / len(scored)


@pytest.mark.parametrize("kind", ["char", "bpe"])
def test_eval_bits_per_byte_match_a_recomputation(setup, tmp_path, capsys, kind):
    root, corpus, out = setup
    if kind == "char":
        out = tmp_path / "char"
        assert main(["train", "--data", str(corpus), "--out", str(out), *TINY,
                     "--max-iters", "1", "--eval-interval", "1"]) == 0
    capsys.readouterr()
    assert main(["eval", "--model", str(out), "--data", str(corpus), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["split"] == "val"
    expected = bits_per_byte_by_hand(load_pretrained(out), corpus.read_text(encoding="utf-8"))
    assert result["bits_per_byte"] == pytest.approx(expected, rel=1e-5)


def test_a_resume_with_another_tokenizer_is_one_line(setup, capsys, tmp_path):
    root, corpus, out = setup
    train_bpe(corpus.read_text(encoding="utf-8"), 280).save(tmp_path / "other")
    before = load_checkpoint(out).state["iter"]
    assert main(["train", "--out", str(out), "--resume", "--tokenizer", str(tmp_path / "other"),
                 "--max-iters", "9"]) == 2
    err = capsys.readouterr().err
    assert "--resume keeps the run's tokenizer" in err and "280 ids" in err
    assert len(err.strip().splitlines()) == 1
    assert load_checkpoint(out).state["iter"] == before


def test_a_char_vocabulary_meeting_unseen_characters_is_one_line(setup, capsys, tmp_path):
    root, corpus, _ = setup
    char_run = tmp_path / "char"
    assert main(["train", "--data", str(corpus), "--out", str(char_run), *TINY,
                 "--max-iters", "1", "--eval-interval", "1"]) == 0
    other = tmp_path / "other.txt"
    other.write_text(corpus.read_text(encoding="utf-8") + "naïve", encoding="utf-8")
    capsys.readouterr()
    assert main(["train", "--data", str(other), "--out", str(tmp_path / "new"), "--tokenizer",
                 str(char_run / "tokenizer"), *TINY, "--max-iters", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert "tokenizer cannot encode" in err and "U+00EF" in err and "\n" not in err


def test_a_vocabulary_too_large_for_memory_is_refused_before_training(setup, capsys, tmp_path):
    root, corpus, _ = setup
    assert main(["train", "--data", str(corpus), "--out", str(tmp_path / "big"), "--tokenizer",
                 str(root / "tok"), "--d-model", "65536", "--n-layer", "1", "--no-progress",
                 "--workers", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert "vocab 320" in err and "would need about" in err and "\n" not in err
    assert not (tmp_path / "big").exists()


def test_tokenizer_and_init_together_are_refused(setup, capsys):
    root, corpus, out = setup
    assert main(["train", "--data", str(corpus), "--out", "x", "--init", str(out),
                 "--tokenizer", str(root / "tok")]) == 2
    assert "give --init or --tokenizer, not both" in capsys.readouterr().err


def test_encoding_in_pieces_gives_the_same_ids(setup, monkeypatch):
    root, corpus, _ = setup
    text = corpus.read_text(encoding="utf-8")
    pieces = list(safe_pieces(text, 997))
    assert len(pieces) > 10 and "".join(piece for _, piece in pieces) == text
    monkeypatch.setattr(data_module, "ENCODE_PIECE", 997)
    monkeypatch.setattr(data_module, "safe_pieces", lambda t: safe_pieces(t, 997))
    tokenizer = load_tokenizer(root / "tok")
    assert encode_text(text, tokenizer.encode, in_pieces=True) == tokenizer.encode(text)
