"""lm-eval tasks over the shared task files (MosaicML's ICL JSONL), no hub: arc_easy, piqa and
winogrande as lm-eval's own definitions shape their prompts.

    write_tasks(data_dir, folder)   writes arc_easy_local.yaml, piqa_local.yaml,
                                    winogrande_local.yaml into `folder`, each reading its file of
                                    `data_dir` (dataset_path: json, data_files); returns `folder`,
                                    the --include_path (TaskManager(include_path=...)) that
                                    names them

    python -m glassformer.lm_eval.tasks --data-dir ../shared/data/eval --out DIR

The prompts are those of lm-eval 0.4's tasks/arc/arc_easy.yaml, tasks/piqa/piqa.yaml and
tasks/winogrande/default.yaml, 0-shot as those are:

    arc_easy     "Question: {question}\\nAnswer:" + " " + choice          acc, acc_norm
    piqa         "Question: {goal}\\nAnswer:"     + " " + solution        acc, acc_norm
    winogrande   sentence up to the blank + option, then " " + the rest   acc (schema: the
                 (lm-eval's "multiple input": one context per option)    options are contexts)

The MosaicML files already hold "Question: ..." as `query` (piqa's ends in "\\n"); winogrande's
`context_options` are lm-eval's partial sentences and `continuation` its target. The tasks are
named *_local so that they never shadow lm-eval's hub-backed arc_easy, piqa and winogrande.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from glassformer.errors import GlassformerError


def metrics(*names: str) -> list[str]:
    """A metric_list as lm-eval's own tasks write it (mean, higher is better)."""
    return ["metric_list:"] + [line for name in names for line in (
        f"  - metric: {name}", "    aggregation: mean", "    higher_is_better: true")]


# name -> (file in the data folder, the YAML lines after the dataset's)
LOCAL_TASKS = {
    "arc_easy_local": ("arc_easy.jsonl", [
        'doc_to_text: "{{query}}\\nAnswer:"',
        "doc_to_target: gold",
        "doc_to_choice: choices",
        *metrics("acc", "acc_norm")]),
    "piqa_local": ("piqa.jsonl", [
        'doc_to_text: "{{query}}Answer:"',      # query is "Question: {goal}\n"
        "doc_to_target: gold",
        "doc_to_choice: choices",
        *metrics("acc", "acc_norm")]),
    "winogrande_local": ("winogrande.jsonl", [
        "doc_to_text: gold",                    # an int: one context per option
        "doc_to_target: continuation",
        "doc_to_choice: context_options",
        *metrics("acc")]),
}


def task_yaml(name: str, data_file: Path) -> str:
    """One task's YAML text (JSON strings are YAML strings, so the path is quoted safely)."""
    _, lines = LOCAL_TASKS[name]
    head = [f"task: {name}", "dataset_path: json", "dataset_kwargs:", "  data_files:",
            f"    test: {json.dumps(str(data_file))}", "test_split: test",
            "output_type: multiple_choice", 'target_delimiter: " "']
    return "\n".join(head + lines + ["metadata:", "  version: 1.0"]) + "\n"


def write_tasks(data_dir: str | Path, folder: str | Path) -> Path:
    """The three local tasks' YAMLs for `data_dir`, written into `folder`; returns `folder`."""
    data_dir, folder = Path(data_dir).resolve(), Path(folder)
    if not data_dir.is_dir():
        raise GlassformerError(f"data dir {data_dir} does not exist (expected a folder of task "
                               "files such as ../shared/data/eval)")
    missing = [file for file, _ in LOCAL_TASKS.values() if not (data_dir / file).is_file()]
    if missing:
        raise GlassformerError(f"{data_dir} lacks {', '.join(missing)}")
    folder.mkdir(parents=True, exist_ok=True)
    for name, (file, _) in LOCAL_TASKS.items():
        (folder / f"{name}.yaml").write_text(task_yaml(name, data_dir / file), encoding="utf-8")
    return folder


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m glassformer.lm_eval.tasks",
        description="write lm-eval task YAMLs (arc_easy_local, piqa_local, winogrande_local) "
                    "over a folder of MosaicML ICL task files; prints the --include_path")
    parser.add_argument("--data-dir", required=True, help="folder with arc_easy.jsonl, "
                        "piqa.jsonl, winogrande.jsonl (e.g. ../shared/data/eval)")
    parser.add_argument("--out", required=True, help="folder to write the YAMLs into")
    args = parser.parse_args(argv)
    try:
        print(write_tasks(args.data_dir, args.out))
    except GlassformerError as error:
        raise SystemExit(f"error: {error}") from None


if __name__ == "__main__":
    main()
