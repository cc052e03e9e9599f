"""A request's prompt as ids, and the ids that end its reply.

`/v1/completions` encodes its `prompt` as plain text (typed control tokens stay text, as
everywhere in glassformer). `/v1/chat/completions` renders its `messages` with the model's own
chat template in Jinja's sandbox, exactly as `glassformer chat` does (tasks/chat.py's
ChatSession: its prompt_ids and stop_ids); a template that raises is the request's 400.
"""
from __future__ import annotations

from glassformer.serve.protocol import bad
from glassformer.tasks.chat import ChatSession
from glassformer.tokenizers.chat_template import chat_template_of
from glassformer.tokenizers.end_of_text import end_of_text_ids


def text_prompt(model, body: dict) -> tuple[list[int], list[int]]:
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1:
        prompt = prompt[0]          # the client's list form, for one prompt
    if not isinstance(prompt, str) or not prompt:
        raise bad("prompt", "a non-empty string (one prompt per request)", prompt)
    return model.tokenizer.encode(prompt), end_of_text_ids(model.tokenizer)


def message_text(index: int, content) -> str:
    """A message's content: a string, or OpenAI's list of parts of which text is kept."""
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list) and all(isinstance(part, dict) and part.get("type") == "text"
                                         and isinstance(part.get("text"), str)
                                         for part in content):
        return "".join(part["text"] for part in content)
    raise bad(f"messages[{index}].content", "a string or a list of text parts", content)


def check_messages(messages) -> list[dict]:
    if not isinstance(messages, list) or not messages:
        raise bad("messages", "a non-empty list of {\"role\", \"content\"} objects", messages)
    checked = []
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise bad(f"messages[{index}]", "an object with a string 'role'", message)
        checked.append({"role": message["role"],
                        "content": message_text(index, message.get("content"))})
    return checked


def chat_prompt(model, body: dict, budget=None) -> tuple[list[int], list[int]]:
    messages = check_messages(body.get("messages"))
    session = ChatSession(model, chat_template_of(model.tokenizer, budget))
    return session.prompt_ids(messages), session.stop_ids()

