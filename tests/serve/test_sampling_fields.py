"""The sampling fields people send (top_k, min_p, penalties, logit_bias) reach the engine and
choose there what generate() chooses alone; a request's n equal prompts are prefilled once; bad
values are one line in OpenAI's error shape."""
import json

import httpx
import numpy as np
import openai
import pytest
from serve_models import save_chat_model, tiny_chat_model
from serve_process import start_server
from test_engine import STOP, WAIT_S, Reply

from glassformer.generate.sampling import Sampling
from glassformer.generate.stream import generated_ids
from glassformer.serve.engine import Engine
from glassformer.serve.sequence import Sequence, Settings

TIMEOUT_S = 60.0
PENALIZED = dict(temperature=0.0, repetition_penalty=1.6, frequency_penalty=0.8,
                 presence_penalty=0.5, logit_bias=((101, 4.0),))


@pytest.fixture(scope="module")
def model():
    return tiny_chat_model(max_seq_len=96)


def alone(model, prompt: str, n: int, sampling: Sampling, seed=None) -> str:
    ids = generated_ids(model, model.tokenizer.encode(prompt), stop_ids=STOP, max_new_tokens=n,
                        sampling=sampling, seed=seed)
    return model.tokenizer.decode(list(ids))


def run(model, prompts, sampling: Sampling, *, max_tokens=20, seeds=None, max_batch=4):
    engine = Engine(model, max_batch=max_batch, max_queue=16, max_len=96)
    replies, seqs = [], []
    for i, prompt in enumerate(prompts):
        reply = Reply()
        seed = None if seeds is None else seeds[i]
        seqs.append(Sequence(i, model.tokenizer.encode(prompt),
                             Settings(max_tokens, sampling, seed), STOP, model.tokenizer, reply))
        replies.append(reply)
    engine.submit(seqs)                                   # together: they join in one admit
    engine.start()
    try:
        assert all(reply.done.wait(WAIT_S) for reply in replies)
    finally:
        engine.stop()
    return replies


def test_penalties_and_bias_in_the_engine_are_generates(model):
    prompts = ["hello hello hello", "cats and cats", "x"]
    replies = run(model, prompts, Sampling(**PENALIZED))
    for prompt, reply in zip(prompts, replies):
        assert reply.text == alone(model, prompt, 20, Sampling(**PENALIZED))
    plain = run(model, prompts[:1], Sampling(0.0))[0].text
    assert plain != replies[0].text                       # the settings did change something


def test_n_equal_prompts_share_one_prefill(model, monkeypatch):
    shapes = []
    forward = model.forward
    monkeypatch.setattr(model, "forward", lambda ids, **kw: shapes.append(ids.shape)
                        or forward(ids, **kw))
    sampling = Sampling(0.9, top_k=20, min_p=0.05)
    replies = run(model, ["the same prompt"] * 3, sampling, seeds=[1, 2, 3])
    assert shapes[0] == (1, len("the same prompt"))       # one prompt computed, three rows
    monkeypatch.setattr(model, "forward", forward)
    for seed, reply in zip([1, 2, 3], replies):
        assert reply.text == alone(model, "the same prompt", 20, sampling, seed)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    folder = save_chat_model(tmp_path_factory.mktemp("tiny") / "tinychat")
    running = start_server(folder, tmp_path_factory.mktemp("log"), "--max-batch", "4")
    yield running
    assert running.stop() == 0


def post(server, body: dict, route="/v1/completions"):
    return httpx.post(server.url + route, content=json.dumps(body).encode(), timeout=TIMEOUT_S)


@pytest.mark.parametrize("extra, words", [
    ({"logit_bias": {"99999999": 1}}, "outside this model's vocabulary"),
    ({"logit_bias": {"5": 101}}, "'logit_bias' must be"),
    ({"logit_bias": {"five": 1}}, "'logit_bias' must be"),
    ({"logit_bias": [1, 2]}, "'logit_bias' must be"),
    ({"top_k": -2}, "'top_k' must be"),
    ({"top_k": 1.5}, "'top_k' must be"),
    ({"min_p": 2}, "'min_p' must be"),
    ({"presence_penalty": 3}, "'presence_penalty' must be"),
    ({"frequency_penalty": "x"}, "'frequency_penalty' must be"),
    ({"repetition_penalty": 0}, "'repetition_penalty' must be"),
])
def test_bad_sampling_fields_are_one_line_400s(server, extra, words):
    answer = post(server, {"prompt": "hi", "max_tokens": 2, **extra})
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert words in error["message"] and set(error) == {"message", "type", "param", "code"}
    assert "\n" not in error["message"]


def test_sampling_fields_through_the_openai_client(server):
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0,
                           timeout=TIMEOUT_S)
    fields = dict(top_k=-1, min_p=0.1, repetition_penalty=1.3)   # top_k -1: off, as vLLM
    reply = client.completions.create(model="tinychat", prompt="once", max_tokens=6, n=3,
                                      seed=3, temperature=0.9, presence_penalty=0.4,
                                      frequency_penalty=0.2, logit_bias={"101": 5},
                                      extra_body=fields)
    assert len(reply.choices) == 3
    again = client.completions.create(model="tinychat", prompt="once", max_tokens=6, n=3,
                                      seed=3, temperature=0.9, presence_penalty=0.4,
                                      frequency_penalty=0.2, logit_bias={"101": 5},
                                      extra_body=fields)
    assert [c.text for c in reply.choices] == [c.text for c in again.choices]
    banned = client.chat.completions.create(
        model="tinychat", messages=[{"role": "user", "content": "hi"}], max_tokens=4,
        temperature=0.0, logit_bias={str(i): -100 for i in range(0, 128)})
    assert banned.choices[0].message.content is not None


def test_eight_seeded_sampled_requests_batched_give_their_text_alone(model):
    # each reply draws from its own generator; the logits alone and batched differ by ~1e-6
    # (not bit for bit: docs/serve.md), which moves no draw here
    sampling = Sampling(0.8, top_p=0.9)
    prompts = ["cats", "a dog", "hello there", "x", "the sea", "once", "zz", "a longer one"]
    replies = run(model, prompts, sampling, seeds=list(range(10, 18)), max_batch=8)
    for prompt, seed, reply in zip(prompts, range(10, 18), replies):
        assert reply.text == alone(model, prompt, 20, sampling, seed)
