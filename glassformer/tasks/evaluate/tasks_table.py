"""The CORE task list: each task's file, ICL type, few-shot count, random baseline and delimiter.

    task                     kind     shots  baseline  continuation delimiter
    arc_easy                 choice   10     0.25      "\\nAnswer: "
    winograd                 schema   0      0.50      " "
    lambada_openai           lm       0      0.0       " "
    ...

The 18 of DCLM's 22 CORE tasks the shared data folder holds (its README.md): the shots and the
random baselines are DCLM's (`eval/eval_meta_data_v1.csv` in mlfoundations/dclm), the
continuation delimiters those of llm-foundry's `tasks_v0.3.yaml` (where it names none, its default
" "). The example separator between few-shot examples is llm-foundry's default, "\\n". Hard-coded
here rather than parsed from the YAML, so that no YAML reader becomes a dependency; the table is
small and is what the CORE figure means.
"""
from __future__ import annotations

from typing import NamedTuple

CHOICE, SCHEMA, LM = "multiple_choice", "schema", "language_modeling"
GENERATION = "generation"    # a chat model writes its answer (GSM8K: generative.py)
DEFAULT_DELIMITER = " "      # llm-foundry's continuation_delimiter when the task names none
EXAMPLE_SEPARATOR = "\n"     # llm-foundry's example_delimiter
ANSWER = "\nAnswer: "


class TaskSpec(NamedTuple):
    name: str              # the task's label (tasks_v0.3.yaml)
    file: str              # the JSONL file in the data folder
    kind: str              # CHOICE, SCHEMA or LM
    shots: int             # DCLM's few-shot count
    baseline: float        # random-guess accuracy, a fraction
    delimiter: str = DEFAULT_DELIMITER   # between an example's context and its continuation


CORE_TASKS = (
    TaskSpec("jeopardy", "jeopardy_all.jsonl", LM, 10, 0.0, ANSWER),
    TaskSpec("bigbench_qa_wikidata", "bigbench_qa_wikidata.jsonl", LM, 10, 0.0),
    TaskSpec("arc_easy", "arc_easy.jsonl", CHOICE, 10, 0.25, ANSWER),
    TaskSpec("arc_challenge", "arc_challenge.jsonl", CHOICE, 10, 0.25, ANSWER),
    TaskSpec("copa", "copa.jsonl", CHOICE, 0, 0.5),
    TaskSpec("commonsense_qa", "commonsense_qa.jsonl", CHOICE, 10, 0.2),
    TaskSpec("piqa", "piqa.jsonl", CHOICE, 10, 0.5, ANSWER),
    TaskSpec("openbook_qa", "openbook_qa.jsonl", CHOICE, 0, 0.25),
    TaskSpec("lambada_openai", "lambada_openai.jsonl", LM, 0, 0.0),
    TaskSpec("winograd", "winograd_wsc.jsonl", SCHEMA, 0, 0.5),
    TaskSpec("winogrande", "winogrande.jsonl", SCHEMA, 0, 0.5),
    TaskSpec("bigbench_dyck_languages", "bigbench_dyck_languages.jsonl", LM, 10, 0.0),
    TaskSpec("agi_eval_lsat_ar", "agi_eval_lsat_ar.jsonl", CHOICE, 3, 0.2),
    TaskSpec("bigbench_cs_algorithms", "bigbench_cs_algorithms.jsonl", LM, 10, 0.0),
    TaskSpec("bigbench_operators", "bigbench_operators.jsonl", LM, 10, 0.0),
    TaskSpec("bigbench_repeat_copy_logic", "bigbench_repeat_copy_logic.jsonl", LM, 10, 0.0),
    TaskSpec("boolq", "boolq.jsonl", CHOICE, 10, 0.62, ANSWER),
    TaskSpec("bigbench_language_identification", "bigbench_language_identification.jsonl",
             CHOICE, 10, 0.091),
)
# siqa.jsonl holds 2 choices an item (every line), so guessing scores 0.5, not SIQA's 1/3
EXTRA_TASKS = (TaskSpec("siqa", "siqa.jsonl", CHOICE, 10, 0.5),   # not part of CORE
               TaskSpec("gsm8k", "gsm8k.jsonl", GENERATION, 8, 0.0))
TASKS = {spec.name: spec for spec in CORE_TASKS + EXTRA_TASKS}
