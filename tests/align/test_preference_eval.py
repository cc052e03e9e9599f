"""Issue 49: preference evaluation (`glassformer eval` on DPO pairs, tasks/preferences.py) at
SFT's cost: several pairs a forward, the head on the completion rows only, no layer's activations
kept (sequence_logps(backward=False)), a progress line off a terminal, --limit N. The numbers are
the same as a plain per-pair computation's (every position's logits, every layer's ctx kept)."""
import json

import numpy as np
import pytest

from align_fixtures import FAST, LORA, pref_records, write_jsonl
from glassformer.cli import main
from glassformer.cli import eval as eval_cli
from glassformer.io.peft import load_adapter
from glassformer.io.pretrained import load_pretrained
from glassformer.ops.token_logps import token_logps_forward
from glassformer.tasks.preferences import preference_accuracy
from glassformer.tokenizers.chat_template import chat_template_of
from glassformer.train.datasets.prefs import encode_pref_file, pair_rows
from glassformer.train.objectives.dpo import sequence_logps

BETA = 0.1


@pytest.fixture(scope="module")
def adapter(tiny_base, tmp_path_factory):
    """A DPO adapter moved away from its base (3 steps at a large learning rate), and its data:
    pairs of unequal lengths, so batches pad."""
    folder = tmp_path_factory.mktemp("pref_eval")
    records = pref_records(24)
    for i, record in enumerate(records):
        record["rejected"][0]["content"] += " no" * (i % 5)
    data = write_jsonl(folder / "prefs.jsonl", records)
    assert main(["finetune", "--model", str(tiny_base), "--data", str(data), "--out",
                 str(folder / "dpo"), "--objective", "dpo", *FAST, *LORA, "--max-iters", "3",
                 "--lr", "0.05", "--workers", "1"]) == 0
    return folder / "dpo", data


def plain_rewards(model, adapter_dir, data_path) -> tuple[np.ndarray, np.ndarray]:
    """(chosen reward, rejected reward) per pair, one pair a forward, the whole (T, V) logits:
    what the batched, head-on-completion-rows evaluation must reproduce."""
    policy = {**model.params, **load_adapter(adapter_dir, model)[0]}
    data = encode_pref_file(data_path, model.tokenizer, chat_template_of(model.tokenizer),
                            block_size=model.cfg.max_seq_len - 1)
    rewards = []
    for pair in range(data.n):
        rows = pair_rows(data, np.array([pair]))
        width = int(data.rows.lengths[rows].max()) - 1
        x = data.rows.ids[rows, :width].astype(np.int64)
        y = data.rows.targets[rows, :width].astype(np.int64)
        sums = []
        for weights in (policy, model.params):
            logits, _ = model.family.forward(weights, x, model.cfg)          # (2, T, V)
            sums.append(token_logps_forward(logits, y)[0].astype(np.float64).sum(axis=1))
        rewards.append(BETA * (sums[0] - sums[1]))
    return np.array(rewards).T                                                # (2, n)


@pytest.mark.parametrize("batch_size", [1, 3, 4, 8, 24])
def test_rewards_are_those_of_a_plain_forward_at_every_batch_size(adapter, tiny_base,
                                                                  batch_size):
    model = load_pretrained(tiny_base)
    chosen, rejected = plain_rewards(model, *adapter)
    assert np.abs(chosen - rejected).min() > 1e-4    # no pair so close that rounding flips it
    seen = []
    result = preference_accuracy(model, adapter[0], adapter[1], beta=BETA,
                                 batch_size=batch_size, on_pairs=lambda d, t: seen.append((d, t)))
    assert result.pairs == 24 and seen[-1] == (24, 24) and len(seen) == -(-24 // batch_size)
    assert result.accuracy == np.mean(chosen > rejected)
    assert result.margin == pytest.approx(np.mean(chosen - rejected), abs=1e-6)
    first = preference_accuracy(model, adapter[0], adapter[1], beta=BETA,
                                batch_size=batch_size, limit=7)
    assert first.pairs == 7 and first.accuracy == np.mean(chosen[:7] > rejected[:7])
    assert first.margin == pytest.approx(np.mean(chosen[:7] - rejected[:7]), abs=1e-6)


def test_a_forward_with_no_backward_keeps_no_ctx_and_gives_the_same_sums(adapter, tiny_base):
    model = load_pretrained(tiny_base)
    data = encode_pref_file(adapter[1], model.tokenizer, chat_template_of(model.tokenizer),
                            block_size=63)
    rows = pair_rows(data, np.arange(6))
    width = int(data.rows.lengths[rows].max()) - 1
    x = data.rows.ids[rows, :width].astype(np.int64)
    y = data.rows.targets[rows, :width].astype(np.int64)
    kept = sequence_logps(model.family, model.params, model.cfg, x, y, train=False)
    light = sequence_logps(model.family, model.params, model.cfg, x, y, train=False,
                           backward=False)
    np.testing.assert_array_equal(light.logps, kept.logps)
    assert kept.ctx.blocks is not None and light.ctx is None and light.logp_ctx is None


def test_eval_limit_and_progress_lines_off_a_terminal(adapter, tiny_base, capsys, monkeypatch):
    run, data = adapter
    assert main(["eval", "--model", str(tiny_base), "--adapter", str(run), "--data", str(data),
                 "--limit", "5", "--batch-size", "2", "--json"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["pairs"] == 5
    assert captured.err.splitlines()[-1] == "eval: 5/5 pairs"   # stderr is not a terminal here
    monkeypatch.setattr(eval_cli, "PAIRS_PER_LINE", 10)   # a line each time 10 more are done
    assert main(["eval", "--model", str(tiny_base), "--adapter", str(run), "--data", str(data),
                 "--batch-size", "7"]) == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("eval:")]
    assert lines == ["eval: 14/24 pairs", "eval: 21/24 pairs", "eval: 24/24 pairs"]
    assert main(["eval", "--model", str(tiny_base), "--adapter", str(run), "--data", str(data),
                 "--no-progress"]) == 0
    captured = capsys.readouterr()
    assert "over 24 pairs" in captured.out and "pairs" not in captured.err


@pytest.mark.parametrize("flags, message", [
    (["--limit", "0"], "the limit must be at least 1 pair, got 0"),
    (["--batch-size", "0"], "the batch size must be at least 1 pair, got 0"),
])
def test_eval_refuses_a_limit_or_batch_below_one(adapter, tiny_base, capsys, flags, message):
    run, data = adapter
    assert main(["eval", "--model", str(tiny_base), "--adapter", str(run), "--data", str(data),
                 *flags]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_eval_refuses_limit_on_a_text_file(tiny_base, tmp_path, capsys):
    text = tmp_path / "text.txt"
    text.write_text("hello world\n" * 50, encoding="utf-8")
    assert main(["eval", "--model", str(tiny_base), "--data", str(text), "--limit", "3"]) == 2
    assert "--limit counts preference pairs" in capsys.readouterr().err
