"""The built-in reward "tang-form": how well a reply keeps the form of a Tang quatrain.

The prompt asks for a five- or seven-character quatrain (五言 / 七言絕句) starting with a given
character 「X」 (../shared/data/tang_sft.jsonl's prompts). The reply (whitespace around it
ignored) is cut into clauses, each a run of text ending in one of ，。！？；. It scores, in all
from 0 to 2.5:

    form      1.0   exactly four clauses of n Chinese characters each, ending ，。，。 in that
                    order, and nothing after the last 。 (n = 5 for 五言, 7 for 七言; a prompt that
                    names neither takes n from the first clause, 5 or 7)
              else  0.2 for each of the first four clauses that has n Chinese characters and
                    nothing else, minus 0.2 for each clause past the fourth and for trailing text
                    with no end mark, at least 0 (so at most 0.8: only the exact form gets 1.0)
    start     0.5   the reply's first character is the asked 「X」 (0 when the prompt asks none)
    distinct  1.0 x the share of distinct characters among the reply's Chinese characters
                    (real quatrains: 0.97 on average); a reply with none scores 0. This is the
                    penalty for repeating characters (「開門開門開」 has 0.4)

A reply that is a real quatrain starting with the asked character scores about 2.47.
"""
from __future__ import annotations

import re

HAN = r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0003134f]"
END_MARKS = "，。！？；"
PATTERN = "，。，。"


def asked_form(prompt: str) -> tuple[int, str | None]:
    """(characters per clause, 0 when unsaid; the asked first character or None)."""
    length = 5 if "五言" in prompt else 7 if "七言" in prompt else 0
    first = re.search(r"「(.)」", prompt)
    return length, (first.group(1) if first else None)


def clauses_of(reply: str) -> tuple[list[tuple[str, str]], str]:
    """([(clause text, its end mark)], the trailing text with no end mark)."""
    found = re.findall(f"([^{END_MARKS}]*)([{END_MARKS}])", reply)
    tail = re.sub(f".*[{END_MARKS}]", "", reply, flags=re.S) if found else reply
    return found, tail


def is_quatrain(reply: str, length: int) -> bool:
    """Exactly four clauses of `length` Chinese characters, ending ，。，。, nothing else."""
    clause = f"{HAN}{{{length}}}"
    return re.fullmatch(f"{clause}，{clause}。{clause}，{clause}。", reply.strip()) is not None


def distinct_share(reply: str) -> float:
    """Distinct Chinese characters / Chinese characters (0 when there are none)."""
    chars = re.findall(HAN, reply)
    return len(set(chars)) / len(chars) if chars else 0.0


def form_score(reply: str, length: int) -> float:
    clauses, tail = clauses_of(reply)
    if not length and clauses:
        first = len(clauses[0][0])
        length = first if first in (5, 7) else 5
    if is_quatrain(reply, length or 5):
        return 1.0
    good = sum(1 for text, _ in clauses[:4] if re.fullmatch(f"{HAN}{{{length}}}", text))
    extra = max(len(clauses) - 4, 0) + (1 if tail.strip() else 0)
    return max(0.2 * good - 0.2 * extra, 0.0)


def tang_form_score(prompt: str, reply: str) -> float:
    """The reward of one reply to one prompt (see the module docstring)."""
    reply = reply.strip()
    length, first = asked_form(prompt)
    start = 0.5 if first is not None and reply.startswith(first) else 0.0
    return form_score(reply, length) + start + distinct_share(reply)


def text_of(value) -> str:
    """A prompt or completion as text: a string, or the last message's content of a list."""
    if isinstance(value, str):
        return value
    return str(value[-1].get("content", "")) if value else ""


def tang_form(prompts, completions, **columns) -> list[float]:
    """TRL's reward signature: one score per (prompt, completion)."""
    return [tang_form_score(text_of(prompt), text_of(completion))
            for prompt, completion in zip(prompts, completions)]
