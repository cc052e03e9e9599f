"""`/v1/completions` with `echo`: every prompt token's log-probability, as OpenAI's legacy API and
lm-evaluation-harness's `local-completions` read it, from a real server on the tiny model: equal
to a direct forward's log-softmax, the first entry null, token-id prompts equal to text, several
prompts in one request, the top alternatives, echo followed by a generated token (max_tokens 1:
from the echo's own forward, equal to a plain request's token), and bad ids."""
import httpx
import numpy as np
import pytest
from serve_models import save_chat_model
from serve_process import start_server

from glassformer.io.pretrained import load_pretrained
from glassformer.ops.cross_entropy import log_softmax_forward

TOL = 1e-5
TIMEOUT_S = 60.0
TEXTS = ["The cat sat on the mat.", "hello there", "A much longer prompt, to pad the others."]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return save_chat_model(tmp_path_factory.mktemp("tiny") / "tinychat")


@pytest.fixture(scope="module")
def model(folder):
    return load_pretrained(folder)


@pytest.fixture(scope="module")
def server(folder, tmp_path_factory):
    running = start_server(folder, tmp_path_factory.mktemp("log"), "--max-batch", "2")
    yield running
    assert running.stop() == 0


def post(server, **body) -> httpx.Response:
    return httpx.post(server.url + "/v1/completions", json=body, timeout=TIMEOUT_S)


def echo(server, prompt, **extra) -> dict:
    response = post(server, **{"prompt": prompt, "echo": True, "max_tokens": 0, "logprobs": 0,
                               **extra})
    assert response.status_code == 200, response.text
    return response.json()


def direct(model, ids: list[int]) -> np.ndarray:
    """log-softmax of one forward over the prompt alone: (T, V)."""
    return log_softmax_forward(model(np.array([ids])))[0][0]


def test_echo_is_a_direct_forward(server, model):
    ids = model.tokenizer.encode(TEXTS[0])
    answer = echo(server, TEXTS[0])
    choice = answer["choices"][0]
    lp = choice["logprobs"]
    assert choice["text"] == TEXTS[0]
    assert lp["tokens"] == [model.tokenizer.decode([i]) for i in ids]
    assert lp["token_logprobs"][0] is None and lp["top_logprobs"][0] is None
    expected = direct(model, ids)[np.arange(len(ids) - 1), ids[1:]]
    np.testing.assert_allclose(lp["token_logprobs"][1:], expected, atol=TOL, rtol=0)
    assert lp["text_offset"] == list(range(len(ids)))       # one byte a token
    assert answer["usage"]["prompt_tokens"] == len(ids)
    assert answer["usage"]["completion_tokens"] == 0


def test_token_ids_equal_text(server, model):
    ids = model.tokenizer.encode(TEXTS[1])
    by_text = echo(server, TEXTS[1])["choices"][0]
    assert echo(server, ids)["choices"][0] == by_text
    assert echo(server, [ids])["choices"][0] == by_text


def test_several_prompts_in_one_forward(server, model):
    batched = [model.tokenizer.encode(t) for t in TEXTS]
    choices = echo(server, batched)["choices"]
    assert [c["index"] for c in choices] == [0, 1, 2]
    for ids, choice in zip(batched, choices):
        expected = direct(model, ids)[np.arange(len(ids) - 1), ids[1:]]
        np.testing.assert_allclose(choice["logprobs"]["token_logprobs"][1:], expected,
                                   atol=TOL, rtol=0)
    texts = echo(server, TEXTS)["choices"]
    assert [c["text"] for c in texts] == TEXTS


def test_top_logprobs(server, model):
    ids = model.tokenizer.encode(TEXTS[1])
    lp = echo(server, ids, logprobs=5)["choices"][0]["logprobs"]
    logp = direct(model, ids)
    for t in range(1, len(ids)):
        top = lp["top_logprobs"][t]
        assert len(top) == 5
        best = np.sort(logp[t - 1])[::-1][:5]
        np.testing.assert_allclose(sorted(top.values(), reverse=True), best, atol=TOL, rtol=0)
        assert lp["token_logprobs"][t] <= max(top.values()) + TOL


def test_echo_then_generate_as_lm_eval_asks(server, model):
    """lm-eval's local-completions: ids of context + continuation, echo, max_tokens 1,
    temperature 0, logprobs 1; it sums token_logprobs[ctxlen:-1] (the last is generated)."""
    ids = model.tokenizer.encode(TEXTS[0])
    body = {"prompt": [ids], "echo": True, "max_tokens": 1, "temperature": 0, "logprobs": 1,
            "seed": 1234}
    response = post(server, **body)
    assert response.status_code == 200, response.text
    lp = response.json()["choices"][0]["logprobs"]
    logp = direct(model, ids)
    assert len(lp["token_logprobs"]) == len(ids) + 1
    greedy = int(np.argmax(logp[-1]))
    np.testing.assert_allclose(lp["token_logprobs"][-1], logp[-1, greedy], atol=1e-4)
    ctxlen = 5
    expected = logp[np.arange(ctxlen - 1, len(ids) - 1), ids[ctxlen:]].sum()
    np.testing.assert_allclose(sum(lp["token_logprobs"][ctxlen:-1]), expected, atol=1e-4)
    text = response.json()["choices"][0]["text"]
    assert text.startswith(TEXTS[0])


@pytest.mark.parametrize("extra", [{"temperature": 0, "logprobs": 3},
                                   {"temperature": 1.0, "seed": 7, "n": 2, "logprobs": 1},
                                   {"temperature": 0}])
def test_echo_with_one_token_generates_what_a_plain_request_does(server, model, extra):
    """echo + max_tokens 1 samples its token from the echo forward's last logits (one forward,
    no engine prefill): the same token, log-probabilities, finish and usage as without echo."""
    ids = model.tokenizer.encode(TEXTS[2])
    echoed = post(server, prompt=[ids, ids[:5]], echo=True, max_tokens=1, **extra).json()
    plain = post(server, prompt=[ids, ids[:5]], max_tokens=1, **extra).json()
    for key in ("prompt_tokens", "completion_tokens"):   # (cached_tokens: the engine's reuse)
        assert echoed["usage"][key] == plain["usage"][key]
    assert len(echoed["choices"]) == len(plain["choices"]) == 2 * extra.get("n", 1)
    for got, want in zip(echoed["choices"], plain["choices"]):
        prompt = TEXTS[2] if got["index"] // extra.get("n", 1) == 0 else model.tokenizer.decode(
            ids[:5])
        assert got["text"] == prompt + want["text"]
        assert got["finish_reason"] == want["finish_reason"]
        if "logprobs" not in extra:
            assert got["logprobs"] is None
            continue
        lp, wanted = got["logprobs"], want["logprobs"]
        assert lp["tokens"][-1:] == wanted["tokens"]
        np.testing.assert_allclose(lp["token_logprobs"][-1:], wanted["token_logprobs"],
                                   atol=TOL)
        assert list(lp["top_logprobs"][-1]) == list(wanted["top_logprobs"][0])


def test_echo_with_one_token_stops_on_a_stop_string(server, model):
    ids = model.tokenizer.encode(TEXTS[0])
    plain = post(server, prompt=[ids], max_tokens=1, temperature=0).json()["choices"][0]
    stop = plain["text"]
    if not stop:
        pytest.skip("the greedy token has no text")
    got = post(server, prompt=[ids], echo=True, max_tokens=1, temperature=0, stop=[stop],
               logprobs=0).json()["choices"][0]
    assert got["finish_reason"] == "stop"
    assert got["text"] == TEXTS[0]


def test_echo_text_only_without_logprobs(server):
    response = post(server, prompt="hi", echo=True, max_tokens=0)
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0] == {"index": 0, "text": "hi", "logprobs": None,
                                             "finish_reason": "length"}


@pytest.mark.parametrize("body, message", [
    ({"prompt": [5, 131], "echo": True, "max_tokens": 0, "logprobs": 0},
     "'prompt' holds the token id 131, outside this model's vocabulary of 131 ids"),
    ({"prompt": [[5, 6], [-1]], "echo": True, "max_tokens": 0, "logprobs": 0},
     "'prompt[1]' holds the token id -1"),
    ({"prompt": [[5, 6], []], "echo": True, "max_tokens": 0}, "'prompt' must be"),
    ({"prompt": [1.5], "echo": True, "max_tokens": 0}, "'prompt' must be"),
    ({"prompt": "hi", "max_tokens": 0}, "'max_tokens' must be an integer >= 1"),
    ({"prompt": "hi", "echo": True, "stream": True}, "'echo' is not streamed"),
    ({"prompt": "hi", "echo": "yes"}, "'echo' must be true or false"),
])
def test_bad_echo_requests(server, body, message):
    response = post(server, **body)
    assert response.status_code == 400
    assert message in response.json()["error"]["message"]
