"""The data forms (train/runs/forms.py) and the record datasets' seeded shuffled epochs
(train/datasets/epochs.py): every record once an epoch, exact resumes, evals in order."""
from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from glassformer.train.datasets.chat import ChatData
from glassformer.train.datasets.epochs import batch_rows, in_order_rows, shuffled_rows
from glassformer.train.datasets.prefs import PrefData
from glassformer.train.loop import TrainConfig
from glassformer.train.objectives import OBJECTIVES
from glassformer.train.objectives.dpo import draw_pairs
from glassformer.train.runs.forms import FORMS, form_of, last_share


def prefs(n: int) -> PrefData:
    """n pairs whose chosen row i holds the id 10 + i, its rejected row 1000 + i."""
    ids = np.concatenate([np.arange(n) + 10, np.arange(n) + 1000])[:, None].repeat(3, axis=1)
    targets = ids.copy()
    lengths = np.full(2 * n, 3, dtype=np.int64)
    return PrefData(ChatData(ids.astype(np.int32), targets.astype(np.int32), lengths, 0), n)


def test_every_objective_reads_a_registered_form():
    for objective in OBJECTIVES.values():
        form = form_of(objective.reads)
        assert form.name == objective.reads
        assert form.records == (objective.reads != "text")
        assert (form.held_out is None) == (not form.records)
        assert form.read is not None or form.start is not None


def test_a_dpo_batch_of_8_from_7_pairs_holds_each_pair_once_or_twice():
    cfg = TrainConfig(batch_size=8, block_size=2, seed=3)
    for step in range(60):
        x, _ = draw_pairs(prefs(7), cfg, step=step)                  # (16, 2)
        chosen, rejected = x[:8, 0] - 10, x[8:, 0] - 1000
        assert (chosen == rejected).all()                            # a pair's rows together
        counts = Counter(chosen.tolist())
        assert set(counts) == set(range(7)) and max(counts.values()) <= 2


@pytest.mark.parametrize("n, batch", [(7, 8), (10, 3), (12, 4), (5, 1)])
def test_each_epoch_covers_every_record_once(n, batch):
    rows = np.concatenate([shuffled_rows(n, batch, 0, step) for step in range(3 * n)])
    for epoch in range(3 * batch):
        assert sorted(rows[epoch * n:(epoch + 1) * n]) == list(range(n))
    first, second = rows[:n], rows[n:2 * n]
    assert not np.array_equal(first, second)                         # a new order each epoch


@pytest.mark.parametrize("n, batch", [(7, 4), (9, 5), (40, 6), (100, 8)])
def test_no_batch_of_at_most_n_records_holds_one_twice(n, batch):
    for step in range(4 * n):
        rows = shuffled_rows(n, batch, 5, step)
        assert len(set(rows.tolist())) == batch


def test_the_batches_are_a_function_of_the_step_alone():
    """A run resumed at any micro-batch draws what the uninterrupted one drew there."""
    straight = [shuffled_rows(23, 5, 11, step) for step in range(40)]
    for resume_at in (0, 1, 4, 5, 17, 39):
        again = [shuffled_rows(23, 5, 11, step) for step in range(resume_at, 40)]
        assert all(np.array_equal(a, b) for a, b in zip(straight[resume_at:], again))
    other_seed = [shuffled_rows(23, 5, 12, step) for step in range(5)]
    assert not all(np.array_equal(a, b) for a, b in zip(straight, other_seed))


def test_length_groups_sort_each_megabatch():
    rows = np.concatenate([shuffled_rows(40, 4, 0, step, group=8) for step in range(10)])
    assert sorted(rows) == list(range(40))
    for start in range(0, 40, 8):
        assert (np.diff(rows[start:start + 8]) > 0).all()


def test_evals_read_the_split_in_order_wrapping():
    assert in_order_rows(5, 2, 0).tolist() == [0, 1]
    assert in_order_rows(5, 2, 2).tolist() == [4, 0]
    cfg = TrainConfig(batch_size=2, seed=0)
    assert batch_rows(5, cfg, step=1, shuffle=False).tolist() == [2, 3]
    grouped = [batch_rows(9, cfg, step=i, shuffle=False, group=4) for i in range(2)]
    assert all(np.array_equal(a, batch_rows(9, cfg, step=i, shuffle=False, group=4))
               for i, a in enumerate(grouped))                       # a fixed order


def test_the_held_out_line():
    assert last_share("pairs", 668, 35) == "held out: the last 35 of 703 pairs (5%)"
    assert FORMS["prefs"].held_out(prefs(6), prefs(1)) == "held out: the last 1 of 7 pairs (14%)"
