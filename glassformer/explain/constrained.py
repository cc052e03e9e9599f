"""`glassformer explain constrained`: constrained decoding walked on a tiny grammar, step by step.

A JSON schema {"ok": boolean, "n": integer 1..12} and a vocabulary of 21 tokens. At each step of
one reply the page shows which tokens the mask allows, which it refuses and at which byte each
refused token's walk through the automaton dies (generate/constrain/: schema -> automaton ->
per-state masks over the token trie), and when the grammar forces text, the one token kept.
"""
from __future__ import annotations

import numpy as np

from glassformer.generate.constrain import build_trie, json_table
from glassformer.generate.constrain.mask import DEAD

SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"},
                                           "n": {"type": "integer", "minimum": 1,
                                                 "maximum": 12}},
          "required": ["ok", "n"], "additionalProperties": False}
TOKENS = ["{", "}", '{"', '"', "ok", '":', "n", ',"', ",", ":", "true", "false", "t", "rue",
          "0", "1", "2", "12", "x", " ", "<eos>"]
EOS = len(TOKENS) - 1
VALUES = ("0", "12", "2", "1", "}", "true", "false", "t")   # refusals worth showing first
REPLY = ['{"', "ok", '":', "t", "rue", ',"', "n", '":', "1", "2", "}", "<eos>"]

TEXT = {
    "en": {
        "title": "Constrained decoding: a JSON schema as a mask over the vocabulary",
        "schema": "schema: {schema}\nvocabulary ({n} tokens): {vocab}\n"
                  "whitespace rule: none (compact JSON, llguidance's whitespace_flexible false)",
        "step": "step {i}: written so far {text}",
        "allowed": "  allowed ({k} of {n}): {tokens}",
        "forced": "  the grammar forces {forced}: only its first token as the tokenizer writes "
                  "it is kept",
        "refused": "  refused {token}: its byte {at} ({byte}) is not allowed after {before}",
        "refused_forced": "  refused {token}: its bytes fit the grammar, but the tokenizer "
                          "writes the forced text otherwise",
        "eos": "  <eos> allowed: the value is complete",
        "chosen": "  chosen: {token}",
        "end": "The reply {text} parses and validates; after it only <eos> was allowed.",
    },
    "zh": {
        "title": "受约束解码：把 JSON schema 变成词表上的掩码",
        "schema": "schema：{schema}\n词表（{n} 个词元）：{vocab}\n"
                  "空白规则：不允许空白（紧凑 JSON，对应 llguidance 的 whitespace_flexible false）",
        "step": "第 {i} 步：已写出 {text}",
        "allowed": "  允许（{n} 个中的 {k} 个）：{tokens}",
        "forced": "  语法在这里只能写出 {forced}：只保留分词器写它时的第一个词元",
        "refused": "  拒绝 {token}：它的第 {at} 个字节（{byte}）不能跟在 {before} 后面",
        "refused_forced": "  拒绝 {token}：它的字节符合语法，但分词器不会这样切分被强制的文本",
        "eos": "  允许 <eos>：这个值已经写完整了",
        "chosen": "  选中：{token}",
        "end": "回复 {text} 能被解析并通过校验；在它之后只允许 <eos>。",
    },
}


def encode(text: str) -> list[int]:
    """The tiny vocabulary's tokenizer: longest token first, left to right."""
    ids, at = [], 0
    ordered = sorted(range(EOS), key=lambda i: -len(TOKENS[i]))
    while at < len(text):
        token = next(i for i in ordered if text.startswith(TOKENS[i], at))
        ids.append(token)
        at += len(TOKENS[token])
    return ids


def dies_at(table, state: int, token: int) -> int:
    """The index of the byte at which the token's walk from `state` is refused (-1: never)."""
    for index, byte in enumerate(TOKENS[token].encode()):
        state = int(table.walk(np.array([state]), np.array([byte]))[0])
        if state == DEAD:
            return index
    return -1


def walk_lines(lang: str) -> list[str]:
    text = TEXT[lang]
    trie = build_trie([t.encode() for t in TOKENS[:EOS]] + [b""])
    table = json_table(SCHEMA, trie, [EOS], encode)
    lines = [text["title"], "", text["schema"].format(
        schema=SCHEMA, n=len(TOKENS), vocab=" ".join(repr(t) for t in TOKENS)), ""]
    state, written = table.start, ""
    for i, choice in enumerate(REPLY, start=1):
        allowed = table.allowed(state)
        lines.append(text["step"].format(i=i, text=repr(written)))
        kept = [TOKENS[t] for t in np.flatnonzero(allowed)]
        lines.append(text["allowed"].format(k=len(kept), n=len(TOKENS),
                                            tokens=" ".join(repr(t) for t in kept)))
        forced, _ = table.forced_text(state)
        if forced and int(allowed.sum()) == 1 and len(forced) > len(kept[0]):
            lines.append(text["forced"].format(forced=repr(forced)))
        refused = [t for t in range(EOS) if not allowed[t]]
        deaths = {t: dies_at(table, state, t) for t in refused}
        telling = lambda t: (deaths[t] != -1, -deaths[t],                  # noqa: E731
                             VALUES.index(TOKENS[t]) if TOKENS[t] in VALUES else len(VALUES))
        for token in sorted(refused, key=telling)[:3]:      # the most telling refusals
            at = deaths[token]
            if at < 0:
                lines.append(text["refused_forced"].format(token=repr(TOKENS[token])))
            else:
                before = repr(written + TOKENS[token][:at])
                lines.append(text["refused"].format(token=repr(TOKENS[token]), at=at + 1,
                                                    byte=repr(TOKENS[token][at]),
                                                    before=before))
        if allowed[EOS]:
            lines.append(text["eos"])
        lines.append(text["chosen"].format(token=repr(choice)))
        token = TOKENS.index(choice)
        assert allowed[token], (written, choice)
        if token != EOS:
            state = table.advance(state, token)
            written += choice
    lines += ["", text["end"].format(text=repr(written))]
    return lines


def explain_constrained(lang: str) -> str:
    return "\n".join(walk_lines(lang)) + "\n"
