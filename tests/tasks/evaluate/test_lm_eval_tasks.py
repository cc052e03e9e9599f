"""The local lm-eval tasks (glassformer/lm_eval/tasks.py): lm-eval reads the written YAMLs over
the shared JSONL and builds the requests lm-eval's own arc_easy, piqa and winogrande build
(their prompt shapes); a bad data dir is one line. No model runs here."""
import json

import pytest

pytest.importorskip("lm_eval")

from lm_eval.tasks import TaskManager  # noqa: E402

from glassformer.errors import GlassformerError  # noqa: E402
from glassformer.lm_eval.tasks import LOCAL_TASKS, main, write_tasks  # noqa: E402

from eval_fixtures import DATA  # noqa: E402


def first_line(name: str) -> dict:
    with open(DATA / name, encoding="utf-8") as lines:
        return json.loads(lines.readline())


def first_requests(tasks, task_name):
    task = tasks[task_name]
    task.build_all_requests(limit=1, rank=0, world_size=1)
    return [instance.arguments for instance in task.instances]


@pytest.fixture(scope="module")
def include(tmp_path_factory):
    """The three tasks as lm-eval loads them (its own task folder not indexed: faster)."""
    if not DATA.is_dir():
        pytest.skip(f"no eval data at {DATA}")
    folder = write_tasks(DATA, tmp_path_factory.mktemp("tasks"))
    manager = TaskManager(include_path=str(folder), include_defaults=False)
    return manager.load(sorted(LOCAL_TASKS))["tasks"]


def test_arc_easy_and_piqa_are_question_answer_with_each_choice_after_a_space(include):
    arc = first_line("arc_easy.jsonl")      # query: "Question: ..."
    assert first_requests(include, "arc_easy_local") == [
        (arc["query"] + "\nAnswer:", " " + choice) for choice in arc["choices"]]
    piqa = first_line("piqa.jsonl")         # query: "Question: {goal}\n"
    assert first_requests(include, "piqa_local") == [
        (piqa["query"] + "Answer:", " " + choice) for choice in piqa["choices"]]


def test_winogrande_scores_the_rest_of_the_sentence_after_each_option(include):
    item = first_line("winogrande.jsonl")
    assert first_requests(include, "winogrande_local") == [
        (option, " " + item["continuation"]) for option in item["context_options"]]


def test_a_bad_data_dir_is_one_line(tmp_path, capsys):
    with pytest.raises(GlassformerError, match="does not exist"):
        write_tasks(tmp_path / "nowhere", tmp_path / "out")
    (tmp_path / "arc_easy.jsonl").write_text("")
    with pytest.raises(GlassformerError, match="lacks piqa.jsonl, winogrande.jsonl"):
        write_tasks(tmp_path, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    with pytest.raises(SystemExit, match="error: .* lacks piqa.jsonl"):
        main(["--data-dir", str(tmp_path), "--out", str(tmp_path / "out")])
    assert sorted(LOCAL_TASKS) == ["arc_easy_local", "piqa_local", "winogrande_local"]
