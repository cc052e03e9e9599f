"""`/v1/embeddings` never embeds part of a text unasked (issue 49): a text past the model's
length is a 400 naming it, unless the request says `truncate` (HF text-embeddings-inference's
field), and `dimensions` is a 400 unless it is the model's own width (its encoders are not
trained to shorten vectors). A real server on a tiny BERT (16 positions, width 16)."""
import httpx
import numpy as np
import openai
import pytest
from serve_process import start_server
from serve_models import tiny_encoder

from glassformer.io.pretrained import save_pretrained
from glassformer.serve.embeddings import embedding_request
from glassformer.serve.protocol import ApiError
from glassformer.tasks.embed import embed

LONG = " ".join(["the cat sat on a mat"] * 4)     # 24 words: 26 tokens with [CLS] and [SEP]
POSITIONS = 16                                     # tiny_encoder's max_seq_len
CLIENT_TIMEOUT_S = 60.0
EMBED_TOL = 1e-5


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    folder = tmp_path_factory.mktemp("enc") / "enc"
    save_pretrained(tiny_encoder(), folder)
    running = start_server(folder, tmp_path_factory.mktemp("log"))
    yield running
    assert running.stop() == 0
    assert "Traceback" not in running.log_text()


def post(server, body: dict) -> httpx.Response:
    return httpx.post(server.url + "/v1/embeddings", json=body, timeout=CLIENT_TIMEOUT_S)


@pytest.mark.parametrize("texts, where", [(LONG, "input is 26 tokens"),
                                          (["a cat", LONG], "input[1] is 26 tokens")])
def test_a_text_past_the_model_is_a_400(server, texts, where):
    answer = post(server, {"input": texts})
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["code"] == "context_length_exceeded" and error["param"] == "input"
    assert where in error["message"] and f"past this model's {POSITIONS}" in error["message"]
    assert "'truncate': true" in error["message"]


def test_truncate_embeds_the_first_tokens(server):
    answer = post(server, {"input": ["a cat", LONG], "truncate": True})
    assert answer.status_code == 200
    expected = embed(tiny_encoder(), ["a cat", LONG], max_length=POSITIONS)
    np.testing.assert_allclose([d["embedding"] for d in answer.json()["data"]], expected,
                               atol=EMBED_TOL)
    assert answer.json()["usage"]["prompt_tokens"] == 4 + POSITIONS


@pytest.mark.parametrize("body, param", [({"truncate": "yes"}, "truncate"),
                                         ({"dimensions": 8}, "dimensions"),
                                         ({"dimensions": 0}, "dimensions"),
                                         ({"dimensions": "16"}, "dimensions")])
def test_bad_truncate_or_dimensions_is_a_400(server, body, param):
    answer = post(server, {"input": "a cat", **body})
    assert answer.status_code == 400 and answer.json()["error"]["param"] == param


def test_dimensions_through_the_openai_client(server):
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0,
                           timeout=CLIENT_TIMEOUT_S)
    whole = client.embeddings.create(model="enc", input="a cat", dimensions=16)
    assert len(whole.data[0].embedding) == 16
    with pytest.raises(openai.BadRequestError, match="not trained to shorten them"):
        client.embeddings.create(model="enc", input="a cat", dimensions=8)


def test_the_sentence_config_length_is_the_limit_below_the_positions():
    """all-MiniLM-L6-v2 has 512 positions but reads 256 (sentence_bert_config.json): the
    server's limit is the smaller one."""
    model = tiny_encoder()
    with pytest.raises(ApiError, match="input is 6 tokens, past this model's 5"):
        embedding_request(model, {"input": "the cat sat on"}, max_length=5)
    asked = embedding_request(model, {"input": "the cat sat on", "truncate": True}, 5)
    assert asked.lengths == [5] and asked.max_length == 5
    assert embedding_request(model, {"input": LONG, "truncate": True}, 256).lengths == [16]
