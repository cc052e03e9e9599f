"""`glassformer serve` on the installed SmolLM2-135M-Instruct and all-MiniLM-L6-v2 (slow):
greedy chat replies (English and Chinese) equal `glassformer chat --message`, sent by two
clients at once, and MiniLM's embeddings equal `glassformer embed`."""
import json
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import openai
import pytest
from serve_process import start_server

from glassformer.cli import main
from glassformer.errors import GlassformerError
from glassformer.packaged import MODEL, packaged_path

pytestmark = pytest.mark.slow
MESSAGES = ["What is the capital of France?", "用一句话介绍长城。"]
NEW_TOKENS = 24
EMBED_TOL = 1e-5   # the same float32 forward on both sides


def installed(name: str) -> None:
    try:
        packaged_path(name, MODEL)
    except GlassformerError as err:
        pytest.skip(str(err))


def cli_stdout(argv, capsys) -> str:
    capsys.readouterr()
    assert main(argv) == 0
    return capsys.readouterr().out.removesuffix("\n")


def test_smollm2_chat_replies_equal_glassformer_chat(tmp_path, capsys):
    installed("smollm2")
    expected = [cli_stdout(["chat", "--model", "smollm2", "--message", message,
                            "--temperature", "0", "--max-new-tokens", str(NEW_TOKENS)], capsys)
                for message in MESSAGES]
    server = start_server("smollm2", tmp_path, "--max-batch", "2", "--context", "512")
    try:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0,
                               timeout=300.0)

        def ask(message):
            reply = client.chat.completions.create(
                model="smollm2", temperature=0, max_tokens=NEW_TOKENS,
                messages=[{"role": "user", "content": message}])
            return reply.choices[0].message.content

        with ThreadPoolExecutor(max_workers=2) as pool:       # batched together
            assert list(pool.map(ask, MESSAGES)) == expected
    finally:
        assert server.stop() == 0


def test_minilm_embeddings_equal_glassformer_embed(tmp_path, capsys):
    installed("minilm")
    texts = ["A man is eating food.", "一个人在吃东西。", "The sky is blue."]
    expected = json.loads(cli_stdout(["embed", "--model", "minilm", "--json", *texts],
                                     capsys))["embeddings"]
    server = start_server("minilm", tmp_path)
    try:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0)
        got = client.embeddings.create(model="minilm", input=texts)
        np.testing.assert_allclose([d.embedding for d in got.data], expected, atol=EMBED_TOL)
    finally:
        assert server.stop() == 0
