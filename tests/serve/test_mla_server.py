"""`glassformer serve` on a DeepSeek-V3 (MLA) folder: its KV cache is the latent one (k: the
latent R, v: the RoPE key Dr, two widths), budgeted by what that cache takes; chat completions,
whole and streamed, with several clients at once, equal `glassformer chat --message` alone."""
from concurrent.futures import ThreadPoolExecutor

import openai
import pytest
from serve_process import start_server
from serve_models import save_chat_model, tiny_mla_chat_model

from glassformer.cli import main

CLIENT_TIMEOUT_S = 60.0
MESSAGES = ["hi", "what is a cat", "tell me more about dogs and mats", "x"]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return save_chat_model(tmp_path_factory.mktemp("tiny") / "tinymla",
                           model=tiny_mla_chat_model(max_seq_len=128))


@pytest.fixture(scope="module")
def server(folder, tmp_path_factory):
    # 3 rows for 4 conversations: rows join and leave while others decode
    running = start_server(folder, tmp_path_factory.mktemp("log"), "--max-batch", "3")
    yield running
    assert running.stop() == 0
    assert "Traceback" not in running.log_text()


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0,
                         timeout=CLIENT_TIMEOUT_S)


def chat_alone(folder, message: str, capsys) -> str:
    capsys.readouterr()
    assert main(["chat", "--model", str(folder), "--message", message, "--temperature", "0",
                 "--max-new-tokens", "20"]) == 0
    return capsys.readouterr().out.removesuffix("\n")


def test_chat_whole_and_streamed_is_glassformer_chat(client, folder, capsys):
    expected = chat_alone(folder, "hi", capsys)
    assert expected     # a reply to compare, not an empty string
    messages = [{"role": "user", "content": "hi"}]
    whole = client.chat.completions.create(model="tinymla", messages=messages, max_tokens=20,
                                           temperature=0)
    assert whole.choices[0].message.content == expected
    chunks = list(client.chat.completions.create(
        model="tinymla", messages=messages, max_tokens=20, temperature=0, stream=True,
        stream_options={"include_usage": True}))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == expected
    assert chunks[-1].usage.total_tokens == whole.usage.total_tokens


def test_clients_at_once_each_get_their_reply_alone(client, folder, capsys):
    expected = [chat_alone(folder, message, capsys) for message in MESSAGES]

    def one(message):
        reply = client.chat.completions.create(
            model="tinymla", max_tokens=20, temperature=0,
            messages=[{"role": "user", "content": message}])
        return reply.choices[0].message.content

    with ThreadPoolExecutor(max_workers=len(MESSAGES)) as pool:
        assert list(pool.map(one, MESSAGES)) == expected
