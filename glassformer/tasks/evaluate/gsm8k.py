"""GSM8K for chat models: the problems, the 8-shot chain-of-thought conversation, the final number.

    file line     {"context": question, "chain_of_thought": worked solution, "answer": "18"}
    conversation  user: question_1      assistant: chain_of_thought_1 + "\\n#### " + answer_1
                  ... (8 solved problems as earlier turns) ...
                  user: the problem asked                assistant: <the model writes here>
    final number  the number after the last "#### " of the reply (GSM8K's own convention, which
                  the shots teach), else the last number in the reply; "1,600" and "$1600.00" are
                  both 1600
    right         the final number equals the file's answer (exact match, as numbers)

Why the shots are earlier user/assistant turns and not one long user message: a chat model reads
a worked example as a turn it wrote itself, so it copies the shape of those turns (reasoning, then
"#### N", then the end of its turn); the text of each solution is the file's, calculator notes
("<<16-3-4=9>>") included, as lm-evaluation-harness's `gsm8k` task shows them.

The shots are one seeded draw from the file for the whole run (the first `shots` of the draw that
are not the problem asked, so a problem never sees its own solution): every prompt but a few then
starts with the same conversation, which runs through the model once (generative.py).
"""
from __future__ import annotations

import random
import re
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import NamedTuple

from glassformer.errors import GlassformerError
from glassformer.io.jsonl import json_lines

SEED = 1234
FIELDS = ("context", "chain_of_thought", "answer")
ANSWER_MARK = "#### "
FINAL = re.compile(r"####\s*\$?\s*(-?[\d,]*\.?\d+)")
NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")


class Problem(NamedTuple):
    line: int                # the line of the file it came from
    question: str
    chain_of_thought: str    # the worked solution
    answer: str              # the final number, as the file writes it


def read_problems(path: str | Path) -> list[Problem]:
    """Every problem of a GSM8K file, or one line naming the file and the bad line."""
    problems = []
    for number, record in json_lines(path):
        where = f"{path} line {number}"
        if not isinstance(record, dict):
            raise GlassformerError(f"{where} is not a JSON object")
        missing = [name for name in FIELDS if name not in record]
        if missing:
            raise GlassformerError(f"{where} lacks {', '.join(missing)} (a GSM8K item has "
                                   f"{', '.join(FIELDS)})")
        if not all(isinstance(record[name], str) for name in FIELDS):
            raise GlassformerError(f"{where}: {', '.join(FIELDS)} must be strings")
        if as_number(record["answer"]) is None:
            raise GlassformerError(f"{where}: answer must be a number, got "
                                   f"{record['answer']!r:.40}")
        problems.append(Problem(number, *(record[name] for name in FIELDS)))
    return problems


def shot_indices(index: int, count: int, shots: int, seed: int = SEED) -> list[int]:
    """The run's `shots` solved problems for problem `index`: one seeded draw of shots + 1 from
    the file, the problem itself left out (so all but shots + 1 problems share the same shots).

    >>> shot_indices(5, 100, 8) == shot_indices(6, 100, 8)
    True
    """
    drawn = random.Random(seed).sample(range(count), min(shots + 1, count))
    return [i for i in drawn if i != index][:shots]


def solution(problem: Problem) -> str:
    """A shot's assistant turn: the worked solution, then GSM8K's "#### N"."""
    return f"{problem.chain_of_thought}\n{ANSWER_MARK}{problem.answer}"


def messages(problems: list[Problem], index: int, shots: int) -> list[dict]:
    """The conversation the model answers: `shots` solved problems, then problem `index`."""
    turns = []
    for i in shot_indices(index, len(problems), shots):
        turns += [{"role": "user", "content": problems[i].question},
                  {"role": "assistant", "content": solution(problems[i])}]
    return turns + [{"role": "user", "content": problems[index].question}]


def as_number(text: str) -> Decimal | None:
    """"1,600", "$1600.00", "1600." as Decimal('1600'); None when it is no number."""
    cleaned = text.strip().replace(",", "").replace("$", "").rstrip(".")
    try:
        return Decimal(cleaned).normalize() + 0   # + 0 turns -0 into 0
    except InvalidOperation:
        return None


def final_number(reply: str) -> str | None:
    """The reply's answer: after its last "####", else its last number; None when it has none.

    >>> final_number("9 eggs a day, 9 * 2 = 18.\\n#### 18"), final_number("So $1,600 in all.")
    ('18', '1,600')
    """
    marked = FINAL.findall(reply)
    if marked:
        return marked[-1]
    numbers = NUMBER.findall(reply)
    return numbers[-1] if numbers else None


def is_right(extracted: str | None, answer: str) -> bool:
    """The extracted number equals the answer, as numbers."""
    return extracted is not None and as_number(extracted) == as_number(answer)
