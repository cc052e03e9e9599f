"""The training log is strict JSON (issue 49): a non-finite number is written as null and named in
the line's "nonfinite", never as the NaN or Infinity tokens strict parsers reject; a resume's trim
drops what a killed run logged past its checkpoint and hands back the record at it."""
import json

import numpy as np
import pytest

from glassformer.io.checkpoint import append_train_log, read_train_log, trim_train_log
from glassformer.io.finite_json import finite_record, json_line


def strict_lines(run_dir):
    def refuse(token):
        raise AssertionError(f"non-standard JSON token {token}")
    text = (run_dir / "train_log.jsonl").read_text(encoding="utf-8")
    return [json.loads(line, parse_constant=refuse) for line in text.splitlines()]


def test_non_finite_values_are_null_and_named(tmp_path):
    append_train_log(tmp_path, {"iter": 3, "train_loss": 1.5, "reward": float("nan"),
                                "kl": np.float32("inf"), "rewards/f/std": -np.inf,
                                "resumed_with": {"lr": [0.1, float("nan")]}, "ok": None})
    [row] = strict_lines(tmp_path)
    assert row["train_loss"] == 1.5 and row["reward"] is None and row["kl"] is None
    assert row["resumed_with"] == {"lr": [0.1, None]} and row["ok"] is None
    assert row["nonfinite"] == ["reward", "kl", "rewards/f/std", "resumed_with.lr.1"]


def test_a_finite_record_has_no_note_and_keeps_its_order():
    line = json_line({"iter": 0, "lr": np.float64(0.001), "train_loss": np.float32(2.5)})
    assert line == '{"iter": 0, "lr": 0.001, "train_loss": 2.5}\n'


def test_a_record_read_back_keeps_its_note_where_still_null():
    back = json.loads(json_line({"iter": 1, "a": float("nan"), "b": float("inf")}))
    back["b"] = 2.0                                  # b measured again, a not
    assert finite_record(back) == {"iter": 1, "a": None, "b": 2.0, "nonfinite": ["a"]}


def test_what_json_cannot_write_is_still_an_error(tmp_path):
    with pytest.raises(TypeError):
        json_line({"iter": 0, "x": object()})


def test_trim_drops_rows_past_the_checkpoint_and_returns_the_one_at_it(tmp_path):
    append_train_log(tmp_path, {"iter": 0, "held_out": "10% of the records"})
    for it in range(6):
        record = {"iter": it, "lr": 1e-3, "train_loss": 5.0 - it}
        if it % 3 == 0:
            record = {"iter": it, "val_loss": 9.0 - it, **record}
        append_train_log(tmp_path, record)
    append_train_log(tmp_path, {"iter": 5, "resumed_with": {}})
    carried = trim_train_log(tmp_path, max_iter=3)   # resuming from the checkpoint at 3
    assert carried == {"iter": 3, "val_loss": 6.0, "lr": 1e-3, "train_loss": 2.0}
    rows = strict_lines(tmp_path)
    assert [(r["iter"], sorted(r)) for r in rows] == [
        (0, ["held_out", "iter"]), (0, ["iter", "lr", "train_loss", "val_loss"]),
        (1, ["iter", "lr", "train_loss"]), (2, ["iter", "lr", "train_loss"])]
    assert trim_train_log(tmp_path, max_iter=3) == {}    # nothing left to drop: not rewritten
    assert trim_train_log(tmp_path / "none", max_iter=3) == {}


def test_trim_rewrites_an_old_logs_nan_tokens_strictly(tmp_path):
    (tmp_path / "train_log.jsonl").write_text('{"iter": 0, "reward": NaN}\n'
                                              '{"iter": 1, "reward": Infinity}\n'
                                              '{"iter": 2, "reward": 1.0}\n', encoding="utf-8")
    trim_train_log(tmp_path, max_iter=1)
    assert strict_lines(tmp_path) == [{"iter": 0, "reward": None, "nonfinite": ["reward"]},
                                      {"iter": 1, "reward": None, "nonfinite": ["reward"]}]
    assert read_train_log(tmp_path)[0]["reward"] is None
