"""`glassformer serve` driven by the official openai client, a real uvicorn process on a tiny
model saved to a folder: models, completions and chat (whole and streamed), replies equal to
`glassformer generate` and `chat --message`, usage, logprobs equal to the model's own
log-softmax, embeddings equal to `glassformer embed`, and every fault a clear error after which
the server keeps serving."""
import json
import signal
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import openai
import pytest
from serve_process import start_server
from serve_models import save_chat_model, tiny_chat_model, tiny_encoder

from glassformer.cli import main
from glassformer.io.pretrained import load_pretrained, save_pretrained
from glassformer.ops.cross_entropy import log_softmax_forward
from glassformer.tasks.chat import ChatSession
from glassformer.tokenizers.chat_template import chat_template_of

LOGPROB_TOL = 1e-4   # float32 logits, batched vs a full forward
EMBED_TOL = 1e-5     # the bound: the same float32 forward
CLIENT_TIMEOUT_S = 60.0


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return save_chat_model(tmp_path_factory.mktemp("tiny") / "tinychat")


@pytest.fixture(scope="module")
def server(folder, tmp_path_factory):
    running = start_server(folder, tmp_path_factory.mktemp("log"), "--max-batch", "4")
    yield running
    assert running.stop() == 0
    assert "glassformer serve: stopped" in running.log_text()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0,
                         timeout=CLIENT_TIMEOUT_S)


def cli_stdout(argv, capsys) -> str:
    capsys.readouterr()
    assert main(argv) == 0
    return capsys.readouterr().out.removesuffix("\n")


def test_models_and_health(client, server):
    assert [m.id for m in client.models.list().data] == ["tinychat"]
    assert httpx.get(server.url + "/health").json() == {"status": "ok"}


def test_greedy_completion_is_glassformer_generate(client, folder, capsys):
    expected = cli_stdout(["generate", "--model", str(folder), "hello there", "--temperature",
                           "0", "--max-new-tokens", "20"], capsys)
    whole = client.completions.create(model="tinychat", prompt="hello there", max_tokens=20,
                                      temperature=0)
    assert whole.choices[0].text == expected
    assert whole.usage.prompt_tokens == len("hello there")
    assert whole.usage.completion_tokens == len(expected)
    pieces = client.completions.create(model="tinychat", prompt="hello there", max_tokens=20,
                                       temperature=0, stream=True)
    assert "".join(chunk.choices[0].text for chunk in pieces if chunk.choices) == expected


def test_greedy_chat_is_glassformer_chat_and_streams_with_usage(client, folder, capsys):
    expected = cli_stdout(["chat", "--model", str(folder), "--message", "hi", "--temperature",
                           "0", "--max-new-tokens", "24"], capsys)
    messages = [{"role": "user", "content": "hi"}]
    whole = client.chat.completions.create(model="tinychat", messages=messages,
                                           max_completion_tokens=24, temperature=0)
    assert whole.choices[0].message.content == expected
    chunks = list(client.chat.completions.create(
        model="tinychat", messages=messages, max_tokens=24, temperature=0, stream=True,
        stream_options={"include_usage": True}))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == expected
    assert chunks[-1].choices == [] and chunks[-1].usage.total_tokens == whole.usage.total_tokens
    # the same conversation again: its prompt is found in a cached row
    again = client.chat.completions.create(model="tinychat", messages=messages, max_tokens=4,
                                           temperature=0)
    assert again.usage.prompt_tokens_details.cached_tokens > 0


def test_logprobs_are_the_models_log_softmax(client, folder):
    messages = [{"role": "user", "content": "what is a cat"}]
    reply = client.chat.completions.create(model="tinychat", messages=messages, max_tokens=10,
                                           temperature=0.7, seed=3, logprobs=True,
                                           top_logprobs=5)
    model = load_pretrained(folder)
    prompt = ChatSession(model, chat_template_of(model.tokenizer)).prompt_ids(messages)
    reply_ids = model.tokenizer.encode(reply.choices[0].message.content)
    ids = prompt + reply_ids
    logp, _ = log_softmax_forward(model(np.array([ids]))[0])        # (T, V)
    entries = reply.choices[0].logprobs.content
    assert len(entries) == len(reply_ids)
    for k, entry in enumerate(entries):
        row = logp[len(prompt) - 1 + k]
        assert entry.logprob == pytest.approx(float(row[reply_ids[k]]), abs=LOGPROB_TOL)
        best = np.sort(row)[::-1][:5]
        np.testing.assert_allclose([t.logprob for t in entry.top_logprobs], best,
                                   atol=LOGPROB_TOL)


def test_n_choices_with_a_seed_are_reproducible(client):
    first = client.completions.create(model="tinychat", prompt="once", max_tokens=8, n=2,
                                      seed=5, temperature=1.0)
    second = client.completions.create(model="tinychat", prompt="once", max_tokens=8, n=2,
                                       seed=5, temperature=1.0)
    assert [c.text for c in first.choices] == [c.text for c in second.choices]
    assert first.usage.completion_tokens == sum(len(c.text) for c in first.choices)


@pytest.mark.parametrize("body, status, words", [
    (b"{not json", 400, "not valid JSON"),
    (json.dumps({"prompt": "hi", "max_tokens": -1}).encode(), 400, "'max_tokens' must be"),
    (json.dumps({"prompt": "x" * 100_000}).encode(), 400, "past this server's context"),
    (json.dumps({"prompt": "hi", "model": "gpt-4"}).encode(), 404, "does not exist"),
    (json.dumps({"prompt": "hi", "temperature": "hot"}).encode(), 400, "'temperature'"),
    (json.dumps(["a list"]).encode(), 400, "JSON object"),
    (json.dumps({"prompt": "hi", "n": 9}).encode(), 400, "'n' must be"),
    (json.dumps({"prompt": "hi", "stop": list("abcde")}).encode(), 400, "'stop' must be"),
    (json.dumps({"prompt": ""}).encode(), 400, "'prompt' must be"),
    (json.dumps({"prompt": "hi", "seed": -1}).encode(), 400, "'seed' must be"),
    (json.dumps({"prompt": "hi", "top_p": float("nan")}).encode(), 400, "'top_p' must be"),
])
def test_bad_requests_are_clear_errors(server, client, body, status, words):
    answer = httpx.post(server.url + "/v1/completions", content=body, timeout=CLIENT_TIMEOUT_S)
    assert answer.status_code == status
    error = answer.json()["error"]
    assert words in error["message"] and set(error) == {"message", "type", "param", "code"}
    assert client.completions.create(model="tinychat", prompt="ok", max_tokens=2).choices


def test_a_raising_template_a_huge_body_and_unknown_paths(server, client):
    with pytest.raises(openai.BadRequestError, match="boom is not allowed"):
        client.chat.completions.create(model="tinychat", max_tokens=2,
                                       messages=[{"role": "user", "content": "boom"}])
    huge = httpx.post(server.url + "/v1/completions", content=b"x" * (10 * 1024 * 1024),
                      timeout=CLIENT_TIMEOUT_S)
    assert huge.status_code == 413 and "over" in huge.json()["error"]["message"]
    assert httpx.get(server.url + "/v2/nothing").status_code == 404
    assert httpx.get(server.url + "/v1/completions").status_code == 405
    assert client.completions.create(model="tinychat", prompt="ok", max_tokens=2).choices


def test_a_client_leaving_mid_stream_frees_its_row(folder, tmp_path):
    model = tiny_chat_model(max_seq_len=4096)
    save_pretrained(model, tmp_path / "long")
    server = start_server(tmp_path / "long", tmp_path, "--max-batch", "1")
    try:
        body = {"prompt": "go on", "max_tokens": 4000, "temperature": 0, "stream": True}
        with httpx.stream("POST", server.url + "/v1/completions", json=body,
                          timeout=CLIENT_TIMEOUT_S) as answer:
            lines = answer.iter_lines()
            assert sum(1 for _, line in zip(range(6), lines) if line.startswith("data: ")) >= 3
        # the only row is free again: the next request is served
        after = httpx.post(server.url + "/v1/completions", timeout=CLIENT_TIMEOUT_S,
                           json={"prompt": "next", "max_tokens": 3, "temperature": 0})
        assert after.status_code == 200 and after.json()["usage"]["completion_tokens"] == 3
    finally:
        assert server.stop() == 0
    left = [line for line in server.log_text().splitlines() if "client left" in line]
    out = int(left[0].split(" out ")[1].split()[0])
    assert out < 4000 / 2      # it stopped decoding when the client went, not at max_tokens


def test_fifty_clients_against_a_queue_of_16(folder, tmp_path):
    server = start_server(folder, tmp_path, "--max-batch", "2", "--max-queue", "16",
                          "--api-key", "sesame")
    try:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="sesame", max_retries=0,
                               timeout=CLIENT_TIMEOUT_S)

        def one(k):
            try:
                reply = client.chat.completions.create(
                    model="tinychat", max_tokens=64, temperature=0,
                    messages=[{"role": "user", "content": f"client {k}"}])
                return reply.choices[0].finish_reason
            except openai.RateLimitError as err:
                assert err.response.headers["retry-after"] == "1"
                return 429

        # threads, not asyncio: Playwright's sync API may hold this thread's event loop
        with ThreadPoolExecutor(max_workers=50) as pool:
            results = list(pool.map(one, range(50)))
        assert 0 < results.count(429) < 50
        assert results.count(429) + results.count("length") + results.count("stop") == 50
        wrong_key = openai.OpenAI(base_url=server.url + "/v1", api_key="guess", max_retries=0)
        with pytest.raises(openai.AuthenticationError):
            wrong_key.models.list()
        assert httpx.get(server.url + "/").status_code == 200    # the page needs no key
    finally:
        assert server.stop() == 0


def test_embeddings_equal_glassformer_embed(tmp_path, capsys):
    save_pretrained(tiny_encoder(), tmp_path / "enc")
    texts = ["the cat sat on a mat", "a cat"]
    expected = json.loads(cli_stdout(["embed", "--model", str(tmp_path / "enc"), "--json",
                                      *texts], capsys))["embeddings"]
    server = start_server(tmp_path / "enc", tmp_path)
    try:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0)
        got = client.embeddings.create(model="enc", input=texts)            # base64 on the wire
        floats = client.embeddings.create(model="enc", input=texts, encoding_format="float")
        for vectors in (got, floats):
            np.testing.assert_allclose([d.embedding for d in vectors.data], expected,
                                       atol=EMBED_TOL)
        assert got.usage.prompt_tokens == 8 + 4
        with pytest.raises(openai.BadRequestError, match="/v1/embeddings"):
            client.completions.create(model="enc", prompt="hi")
    finally:
        assert server.stop() == 0


def test_ctrl_c_lets_a_reply_in_flight_finish(folder, tmp_path):
    server = start_server(folder, tmp_path)
    body = {"prompt": "long", "max_tokens": 200, "temperature": 0, "stream": True}
    try:
        with httpx.stream("POST", server.url + "/v1/completions", json=body,
                          timeout=CLIENT_TIMEOUT_S) as answer:
            lines = answer.iter_lines()
            assert next(line for line in lines if line.startswith("data: {"))
            server.process.send_signal(signal.SIGINT)          # Ctrl-C while it streams
            rest = [line for line in lines if line.startswith("data: ")]
        assert rest[-1] == "data: [DONE]"
        finish = json.loads(rest[-2][len("data: "):])["choices"][0]["finish_reason"]
        assert finish in ("length", "stop")
    finally:
        assert server.stop() == 0
    assert "glassformer serve: stopped" in server.log_text()
