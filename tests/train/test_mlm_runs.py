"""`glassformer train --arch bert --objective mlm`: a tiny run on Tang poems, exact resume (the
masks come from the saved generator), fill-mask on the run, and the one-line refusals."""
from pathlib import Path

import numpy as np
import pytest

from glassformer import inspect
from glassformer.cli import main
from glassformer.errors import GlassformerError
from glassformer.io.checkpoint import load_checkpoint, read_train_log
from glassformer.io.pretrained import load_pretrained
from glassformer.tasks.fill_mask import fill_mask
from glassformer.tasks.perplexity import evaluate_ids
from glassformer.tokenizers.char import CharTokenizer

TANG = Path(__file__).resolve().parents[2].parent / "shared" / "data" / "tang_poems.txt"
POEMS = 120    # lines of the file: enough for a train and a val split of tiny windows
TINY = ["--arch", "bert", "--objective", "mlm", "--n-layer", "1", "--n-head", "2",
        "--d-model", "16", "--block-size", "16", "--batch-size", "4", "--eval-iters", "2",
        "--warmup-iters", "2", "--workers", "1", "--no-progress"]


@pytest.fixture
def poems(tmp_path):
    if not TANG.is_file():
        pytest.skip(f"corpus {TANG} is absent")
    with TANG.open(encoding="utf-8") as f:
        lines = [next(f) for _ in range(POEMS)]
    path = tmp_path / "poems.txt"
    path.write_text("".join(lines), encoding="utf-8")
    return path


def losses(out):
    return {r["iter"]: r["train_loss"] for r in read_train_log(out) if "train_loss" in r}


def test_resume_is_exact_and_the_run_fills_masks(poems, tmp_path):
    straight, split = tmp_path / "straight", tmp_path / "split"
    common = ["train", "--data", str(poems), *TINY, "--eval-interval", "3"]
    assert main([*common, "--out", str(straight), "--max-iters", "6"]) == 0
    assert main([*common, "--out", str(split), "--max-iters", "3"]) == 0
    assert main(["train", "--out", str(split), "--max-iters", "6", "--resume",
                 "--no-progress"]) == 0
    assert sorted(losses(straight)) == list(range(6))
    assert losses(straight) == losses(split)      # the same masks, bit for bit
    final, resumed = load_checkpoint(straight), load_checkpoint(split)
    assert all(np.array_equal(final.params[k], resumed.params[k]) for k in final.params)
    assert final.state["train_config"]["objective"] == "mlm"
    model = load_pretrained(straight)
    assert model.arch == "bert" and model.cfg.mlm_head
    assert set(model.tokenizer.special_tokens) == {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"}
    options = fill_mask(model, "秦川雄帝[MASK]，函谷壯皇居。", top_k=2)
    assert len(options) == 1 and len(options[0]) == 2
    # the viewer reads the trained encoder's attention: every token sees both sides
    page = tmp_path / "show.html"
    assert main(["show", "--model", str(straight), "--out", str(page), "秦川雄帝宅"]) == 0
    assert "bidirectional (encoder)" in page.read_text(encoding="utf-8")
    weights = inspect(model, model.tokenizer.encode("秦川雄帝宅")).attentions[0][0]  # (H, T, T)
    assert np.triu(weights, k=1).sum() > 0.0     # weight on later tokens: a decoder has none


def one_line_error(args, capsys) -> str:
    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err
    return err


def test_refusals_are_one_line(poems, tmp_path, capsys):
    out = str(tmp_path / "r")
    err = one_line_error(["train", "--data", str(poems), "--arch", "gpt2", "--objective", "mlm",
                          "--out", out], capsys)
    assert "--objective mlm trains an encoder: give --arch bert" in err
    err = one_line_error(["train", "--data", str(poems), "--arch", "bert", "--objective",
                          "next-token", "--out", out], capsys)
    assert "--arch bert trains with --objective mlm" in err
    plain = CharTokenizer.from_text(poems.read_text(encoding="utf-8"))
    plain.save(tmp_path / "plain")
    err = one_line_error(["train", "--data", str(poems), *TINY, "--tokenizer",
                          str(tmp_path / "plain"), "--out", out], capsys)
    assert "needs a vocabulary with [CLS], [SEP] and [MASK]" in err
    assert not Path(out).exists()                 # refused before anything was written


def test_a_sequence_longer_than_the_position_table_is_one_line(poems, tmp_path):
    assert main(["train", "--data", str(poems), *TINY, "--out", str(tmp_path / "r"),
                 "--max-iters", "0"]) == 0
    model = load_pretrained(tmp_path / "r")
    with pytest.raises(GlassformerError, match="past the context of max_seq_len=16"):
        model(np.ones((1, 17), np.int64))
    with pytest.raises(GlassformerError, match="next-token loss, which a BERT encoder does not"):
        evaluate_ids(model, np.ones(40, np.int64))


def test_neighbour_heads_hold_still_for_hold_iters_then_train(poems, tmp_path):
    out = tmp_path / "held"
    common = ["train", "--data", str(poems), "--out", str(out), *TINY, "--d-model", "32",
              "--hold-iters", "3", "--eval-interval", "3"]
    assert main([*common, "--max-iters", "0"]) == 0
    start = load_checkpoint(out)
    # 16 fits 16: the recipe records the held keys in the run's train config, not the model's
    assert start.state["train_config"]["held_keys"].split(",")[0] == "pos_emb"
    assert "neighbour_heads" not in start.config
    assert main(["train", "--out", str(out), "--max-iters", "3", "--resume",
                 "--no-progress"]) == 0
    held = load_checkpoint(out)
    assert held.state["train_config"]["hold_iters"] == 3
    kept = ("pos_emb", "blocks.0.attn.wq", "blocks.0.attn.bq", "blocks.0.attn.wk",
            "blocks.0.attn.bk")
    assert all(np.array_equal(start.params[k], held.params[k]) for k in kept)
    assert not np.array_equal(start.params["blocks.0.attn.wv"], held.params["blocks.0.attn.wv"])
    assert main(["train", "--out", str(out), "--max-iters", "5", "--resume",
                 "--no-progress"]) == 0
    moved = load_checkpoint(out)
    assert all(not np.array_equal(start.params[k], moved.params[k]) for k in kept)


def test_a_negative_hold_is_refused(poems, tmp_path, capsys):
    code = main(["train", "--data", str(poems), "--out", str(tmp_path / "r"), *TINY,
                 "--hold-iters", "-1", "--max-iters", "2"])
    assert code != 0
    assert "--hold-iters must be >= 0" in capsys.readouterr().err
    assert not (tmp_path / "r").exists()
