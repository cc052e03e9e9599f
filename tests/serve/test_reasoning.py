"""Reasoning models (serve/reasoning.py): a reply's `<think> ... </think>` split off as
`message.reasoning` / `delta.reasoning`, `chat_template_kwargs` reaching the template (Qwen3's
enable_thinking), and `--reasoning-budget` closing the thinking. A tiny random LLaMA with a
byte tokenizer whose control tokens include the two tags, and a Qwen3-style template: its
generation prompt opens `<think>` unless enable_thinking is false, which closes it (as Qwen3's
own template does, there with an empty thinking)."""
import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
from serve_models import SPECIAL_NAMES, save_chat_model, thinking_model
from starlette.testclient import TestClient

from glassformer.cli import main
from glassformer.models import llama
from glassformer.models.model import Model
from glassformer.serve.app import Served, create_app
from glassformer.serve.engine import Engine
from glassformer.serve.prompts import chat_prompt
from glassformer.serve.reasoning import Reasoning, opens_thinking, thinking_of
from glassformer.serve.sequence import Delta, Sequence, Settings
from glassformer.tokenizers.bpe import BPETokenizer
from glassformer.tokenizers.tokenizer_config import TokenizerConfig

BUDGET = 3
TRL = importlib.util.find_spec("trl")   # a test dependency; it ships Qwen3's own template
QWEN3 = Path(TRL.origin if TRL else ".").parent / "chat_templates" / "qwen3.jinja"
ASK = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def model():
    return thinking_model()


@pytest.fixture(scope="module")
def client(model):
    engine = Engine(model, max_batch=2, max_queue=8, max_len=128)
    served = Served(model, "thinker", engine, reasoning_budget=BUDGET)
    with TestClient(create_app(served)) as client:
        yield client


def split_all(reasoning: Reasoning, pieces: list[str]) -> tuple[str, str]:
    parts = [part for piece in pieces for part in reasoning.split(piece)] + reasoning.flush()
    return ("".join(text for thinking, text in parts if thinking),
            "".join(text for thinking, text in parts if not thinking))


@pytest.mark.parametrize("text, thought, answer", [
    ("<think>\nlet me see</think>\n\nIt is 4.", "let me see", "It is 4."),
    ("It is 4.", "", "It is 4."),
    ("It is <think>4</think>.", "", "It is <think>4</think>."),   # only at the start
    ("<think>still thinking", "still thinking", ""),               # cut by max_tokens
    ("<thi", "", "<thi"),
])
def test_the_split_of_a_reply_however_it_is_cut(text, thought, answer):
    for size in (1, 2, 3, len(text)):
        pieces = [text[i:i + size] for i in range(0, len(text), size)]
        assert split_all(Reasoning(False, None, []), pieces) == (thought, answer)


def test_a_prompt_that_opens_the_thinking_starts_inside_it(model):
    tokenizer = model.tokenizer
    opened = tokenizer.special_tokens["<think>"]
    closed = tokenizer.special_tokens["</think>"]
    assert opens_thinking(tokenizer, tokenizer.encode("q") + [opened])
    assert not opens_thinking(tokenizer, [opened, closed])
    assert split_all(Reasoning(True, None, []), ["\nhm</th", "ink>\n\nyes"]) == ("hm", "yes")


def test_a_qwen3_style_reply_whose_first_token_opens_the_thinking(model):
    """The model writes <think> itself (Qwen3): control tokens in the reply, split on them."""
    tokenizer = model.tokenizer
    events = []
    seq = Sequence(0, [1], Settings(max_tokens=50), frozenset(), tokenizer, events.append,
                   reasoning=Reasoning(False, None, []))
    ids = [tokenizer.special_tokens["<think>"], *tokenizer.encode("\nwhy?\n"),
           tokenizer.special_tokens["</think>"], *tokenizer.encode("\n\nbecause")]
    for token in ids:
        seq.accept(token, None)
    seq.finish("length")
    deltas = [event for event in events if isinstance(event, Delta)]
    assert "".join(d.text for d in deltas if d.reasoning) == "why?\n"
    assert "".join(d.text for d in deltas if not d.reasoning) == "because"


def test_the_budget_forces_the_closing_tag_then_the_answer(client, model):
    body = {"messages": ASK, "temperature": 0, "max_tokens": 12, "logprobs": True}
    reply = client.post("/v1/chat/completions", json=body).json()
    message = reply["choices"][0]["message"]
    tokens = [t["token"] for t in reply["choices"][0]["logprobs"]["content"]]
    assert tokens[BUDGET] == "</think>" and "</think>" not in tokens[:BUDGET]
    assert message["reasoning"] == ("".join(tokens[:BUDGET]).strip() or None)
    assert message["content"] == "".join(tokens[BUDGET + 1:]).lstrip()
    assert reply["usage"]["completion_tokens"] == 12
    streamed = client.post("/v1/chat/completions", json={**body, "stream": True})
    chunks = [json.loads(line[6:]) for line in streamed.text.split("\n\n")
              if line.startswith("data: {")]
    deltas = [c["choices"][0]["delta"] for c in chunks if c["choices"]]
    assert "".join(d.get("reasoning", "") for d in deltas) == (message["reasoning"] or "")
    assert "".join(d.get("content", "") for d in deltas) == message["content"]


def test_enable_thinking_false_reaches_the_template(client):
    body = {"messages": ASK, "temperature": 0, "max_tokens": 8, "logprobs": True,
            "chat_template_kwargs": {"enable_thinking": False}}
    reply = client.post("/v1/chat/completions", json=body).json()
    message = reply["choices"][0]["message"]
    tokens = [t["token"] for t in reply["choices"][0]["logprobs"]["content"]]
    assert message["reasoning"] is None and "</think>" not in tokens   # no budget to spend
    assert message["content"] == "".join(tokens)


@pytest.mark.parametrize("kwargs, words", [
    ([1], "'chat_template_kwargs' must be an object"),
    ({"messages": []}, "other than messages"),
    ({"_secret": 1}, "starting with '_'"),
])
def test_bad_template_kwargs_are_a_400(client, kwargs, words):
    answer = client.post("/v1/chat/completions", json={"messages": ASK,
                                                         "chat_template_kwargs": kwargs})
    assert answer.status_code == 400 and words in answer.json()["error"]["message"]


def test_completions_and_models_without_the_tags_are_not_split(client, model):
    reply = client.post("/v1/completions", json={"prompt": "a", "max_tokens": 4,
                                                  "temperature": 0}).json()
    assert "reasoning" not in reply["choices"][0]
    plain = BPETokenizer({bytes([b]): b for b in range(128)}, [],
                         special_tokens={name: 128 + i for i, name in enumerate(SPECIAL_NAMES)})
    plain.config = TokenizerConfig("{{ messages[0]['content'] }}", {})
    cfg = llama.LlamaConfig(vocab_size=plain.vocab_size, max_seq_len=16, n_layer=1, n_head=2,
                            d_model=8)
    tiny = Model(cfg, llama.init_params(cfg, np.random.default_rng(0)), plain)
    assert thinking_of(tiny) is None and thinking_of(model).closing == [132]


def test_a_negative_budget_is_one_line(capsys):
    assert main(["serve", "--model", "smollm2", "--reasoning-budget", "-1"]) != 0
    assert "--reasoning-budget must be >= 0" in capsys.readouterr().err


def test_the_budget_also_closes_a_thinking_the_reply_opened(model):
    """Qwen3's flow: no <think> in the prompt, the reply's first token opens it; the budget
    counts from there and then asks for the closing tag."""
    tokenizer = model.tokenizer
    reasoning = Reasoning(False, 2, [tokenizer.special_tokens["</think>"]])
    seq = Sequence(0, [1], Settings(max_tokens=50), frozenset(), tokenizer, lambda e: None,
                   reasoning=reasoning)
    forced = []
    for token in [tokenizer.special_tokens["<think>"], *tokenizer.encode("ab")]:
        forced.append(reasoning.next_forced())
        seq.accept(token, None)
    assert forced == [None, None, None]
    assert reasoning.next_forced() == tokenizer.special_tokens["</think>"]
    assert reasoning.next_forced() is None


@pytest.mark.skipif(not QWEN3.is_file(), reason="TRL's copy of Qwen3's template is absent")
def test_qwen3s_own_template_and_enable_thinking():
    """Qwen3's real template (TRL ships it): enable_thinking false closes an empty thinking in
    the prompt, so the reply is all content; by default the prompt opens nothing."""
    model = thinking_model()
    model.tokenizer.config = TokenizerConfig(QWEN3.read_text(encoding="utf-8"),
                                             {"eos_token": "<|im_end|>"})
    engine = Engine(model, max_batch=1, max_queue=4, max_len=128)
    with TestClient(create_app(Served(model, "qwen3", engine, reasoning_budget=2))) as client:
        for kwargs, tail in (({"enable_thinking": False}, "<think>\n\n</think>\n\n"),
                             ({}, "<|im_start|>assistant\n")):
            prompt, _ = chat_prompt(model, {"messages": ASK, "chat_template_kwargs": kwargs})
            assert model.tokenizer.decode(prompt).endswith(tail)
            assert not opens_thinking(model.tokenizer, prompt)
            reply = client.post("/v1/chat/completions", json={
                "messages": ASK, "temperature": 0, "max_tokens": 6, "logprobs": True,
                "chat_template_kwargs": kwargs}).json()["choices"][0]
            tokens = [t["token"] for t in reply["logprobs"]["content"]]
            assert reply["message"]["reasoning"] is None and "</think>" not in tokens
            assert reply["message"]["content"] == "".join(tokens)


def test_a_budget_for_a_model_that_does_not_think_is_one_line(tmp_path, capsys):
    save_chat_model(tmp_path / "plain")
    assert main(["serve", "--model", str(tmp_path / "plain"), "--port", "0",
                 "--reasoning-budget", "4"]) != 0
    assert "have no </think>" in capsys.readouterr().err
