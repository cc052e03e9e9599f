"""`glassformer eval --task/--core`: a run on the tiny model, its results file and --compare, and
each bad input refused in one line before the model loads."""
import json

import pytest

import glassformer.cli.eval_tasks as eval_tasks
from eval_fixtures import DATA, tiny_model
from glassformer.cli import main


@pytest.fixture
def tiny(monkeypatch):
    model = tiny_model()
    monkeypatch.setattr(eval_tasks, "load_model_shown", lambda name, adapter=None, *rest: model)
    return model


def test_a_task_run_reports_figures_writes_items_and_compares(tiny, tmp_path, capsys):
    out = tmp_path / "r.json"
    argv = ["eval", "--model", "tiny", "--task", "copa,winograd", "--data-dir", str(DATA),
            "--limit", "6", "--out", str(out)]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "copa" in text and "acc_norm" in text and "CORE over 2 tasks" in text
    record = json.loads(out.read_text())
    items = record["tasks"]["copa"]["items"]
    assert len(items) == 6 and len(items[0]["logliks"]) == 2
    assert main(argv + ["--compare", str(out), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert all(row["difference"] == 0 and not row["changed"] for row in summary["compare"])


def test_dequantize_reaches_the_loader(monkeypatch, tmp_path):
    """--dequantize and --activation-quant are the loader's, for task runs as for a text."""
    seen = []
    model = tiny_model()

    def load(name, adapter=None, dequantize=False, activations="float32"):
        seen.append((dequantize, activations))
        return model

    monkeypatch.setattr(eval_tasks, "load_model_shown", load)
    argv = ["eval", "--model", "tiny", "--task", "copa", "--data-dir", str(DATA), "--limit",
            "2", "--out", str(tmp_path / "r.json"), "--dequantize", "--json"]
    assert main(argv) == 0
    assert seen == [(True, "float32")]


@pytest.mark.parametrize("extra,message", [
    (["--task", "arc_easyy"], "unknown task arc_easyy; known tasks: jeopardy,"),
    (["--task", "copa", "--limit", "0"], "--limit must be at least 1, got 0"),
    (["--task", "copa", "--data-dir", "/nonexistent"], "data dir /nonexistent does not exist"),
    (["--task", "copa"], "--data-dir DIR"),
])
def test_bad_input_is_one_line(extra, message, capsys):
    argv = ["eval", "--model", "nothing-loaded"] + extra
    if "--data-dir" not in extra and extra[-1] != "copa":
        argv += ["--data-dir", str(DATA)]
    if extra[1:] == ["--limit", "0"]:
        argv += ["--data-dir", str(DATA)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and "Traceback" not in err


@pytest.mark.parametrize("line,message", [
    ('{"query": "q", "choices": [], "gold": 0}', "copa.jsonl line 2 has an empty choice list"),
    ('{"query": "q", "choices": ["a"', "copa.jsonl line 2 is not valid JSON"),
])
def test_a_bad_task_file_names_file_and_line(tmp_path, line, message, capsys):
    (tmp_path / "copa.jsonl").write_text('{"query": "q", "choices": ["a"], "gold": 0}\n'
                                         + line + "\n")
    argv = ["eval", "--model", "nothing-loaded", "--task", "copa", "--data-dir", str(tmp_path)]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1
