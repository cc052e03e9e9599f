"""plot_loss_curve writes loss.png without choosing matplotlib's backend: a notebook that trains
in its own kernel keeps its inline plots (pyplot's backend before and after is the same)."""
import json
import subprocess
import sys

import pytest

from glassformer.train.runs.text import plot_loss_curve

CHILD = """
import json, sys
import matplotlib
matplotlib.use("svg")                     # stands in for a notebook's inline backend
from glassformer.train.runs.text import plot_loss_curve
path = plot_loss_curve(sys.argv[1])
print(json.dumps([str(path), matplotlib.get_backend()]))
"""


def write_log(folder):
    rows = [{"iter": 0, "train_loss": 4.2, "val_loss": 4.1}, {"iter": 1, "train_loss": 3.0}]
    (folder / "train_log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_the_curve_is_written(tmp_path):
    pytest.importorskip("matplotlib")
    write_log(tmp_path)
    path = plot_loss_curve(tmp_path)
    assert path == tmp_path / "loss.png" and path.read_bytes()[:4] == b"\x89PNG"


def test_the_backend_is_left_alone(tmp_path):
    pytest.importorskip("matplotlib")
    write_log(tmp_path)
    out = subprocess.run([sys.executable, "-c", CHILD, str(tmp_path)], capture_output=True,
                         text=True, check=True).stdout
    path, backend = json.loads(out.splitlines()[-1])
    assert path.endswith("loss.png") and backend == "svg"
