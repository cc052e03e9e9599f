"""The chat page at `/` in headless Chromium: a message sent with Enter (Chinese text), the reply
streams in as token elements carrying their probabilities, hovering one shows its top 5, the key
comes from ?api_key=, nothing is fetched from anywhere but the server, no console error."""
import openai
import pytest
from serve_process import start_server
from serve_models import save_chat_model

WAIT_MS = 60_000   # generous: the 2-core test machine is shared
MESSAGE = "你好，世界！hello"


@pytest.fixture
def served(tmp_path):
    server = start_server(save_chat_model(tmp_path / "tinychat", n_bytes=256), tmp_path,
                          "--api-key", "sesame")
    yield server
    assert server.stop() == 0


def test_a_reply_streams_into_the_page_with_probabilities(served, browser):
    context = browser.new_context()
    page = context.new_page()
    requests, errors = [], []
    page.on("request", lambda request: requests.append(request.url))
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    page.on("pageerror", lambda err: errors.append(str(err)))
    try:
        page.goto(served.url + "/?api_key=sesame")
        page.fill("#temperature", "0")
        page.fill("#input", MESSAGE)
        page.press("#input", "Enter")
        page.wait_for_selector("#log .assistant.done", timeout=WAIT_MS)
        assert page.locator("#log .assistant.failed").count() == 0, page.inner_html("#log")
        assert page.locator("#log .user").inner_text() == MESSAGE
        tokens = page.locator("#log .assistant .token")
        assert tokens.count() > 0
        probabilities = [float(p) for p in tokens.evaluate_all(
            "spans => spans.map(s => s.dataset.p)")]
        assert all(0.0 < p <= 1.0 for p in probabilities)
        assert "" not in tokens.evaluate_all("spans => spans.map(s => s.textContent)")
        shown = "".join(tokens.evaluate_all("spans => spans.map(s => s.textContent)"))
        tokens.first.hover()
        assert page.locator("#tip tr").count() == 5 and page.locator("#tip").is_visible()
        assert "cached" in page.locator("#log .assistant .usage").inner_text()
    finally:
        context.close()
    client = openai.OpenAI(base_url=served.url + "/v1", api_key="sesame", max_retries=0)
    greedy = client.chat.completions.create(model="tinychat", temperature=0,
                                            messages=[{"role": "user", "content": MESSAGE}])
    assert shown == greedy.choices[0].message.content
    assert requests and all(url.startswith(served.url + "/") for url in requests), requests
    assert errors == [], errors
