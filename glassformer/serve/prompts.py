"""A request's prompt as ids, and the ids that end its reply.

`/v1/completions` takes its `prompt` in OpenAI's four forms: a string, a list of strings, a list
of token ids, or a list of lists of token ids (a list gives one reply per prompt). Text is
encoded as plain text (typed control tokens stay text, as everywhere in glassformer); ids are
taken as they are (no BOS added: lm-evaluation-harness sends its own), each checked against the
vocabulary. `/v1/chat/completions` renders its `messages` with the model's own
chat template in Jinja's sandbox, exactly as `glassformer chat` does (tasks/chat.py's
ChatSession: its prompt_ids and stop_ids); a template that raises is the request's 400.
`chat_template_kwargs` (as vLLM takes it: Qwen3's `{"enable_thinking": false}`) are more
variables for the template; the names the renderer itself takes are refused.
"""
from __future__ import annotations

from glassformer.generate.generate import padding_start
from glassformer.serve.protocol import ApiError, bad
from glassformer.tasks.chat import ChatSession
from glassformer.tokenizers.chat_template import chat_template_of
from glassformer.tokenizers.end_of_text import end_of_text_ids


MAX_PROMPTS = 256          # prompts in one request
TOOL_KEYS = ("tool_calls", "tool_call_id", "name")   # kept for templates that render tools
RESERVED = ("messages", "add_generation_prompt", "budget", "template")   # render_chat's own
PROMPT_FORMS = (f"a non-empty string, token ids, or a list of at most {MAX_PROMPTS} "
                "non-empty strings or lists of token ids")


def text_prompts(model, body: dict) -> tuple[list[list[int]], list[int]]:
    """The ids of every prompt of a completion request, and the ids that end a reply."""
    prompt = body.get("prompt")
    if is_ids(prompt):
        prompts = [prompt]
    elif isinstance(prompt, str):
        prompts = [prompt]
    elif isinstance(prompt, list) and 0 < len(prompt) <= MAX_PROMPTS:
        prompts = prompt
    else:
        raise bad("prompt", PROMPT_FORMS, prompt)
    vocab = padding_start(model) or model.cfg.vocab_size
    found = []
    for index, one in enumerate(prompts):
        if isinstance(one, str) and one:
            found.append(model.tokenizer.encode(one))
        elif is_ids(one):
            found.append(checked_ids(one, vocab, index if len(prompts) > 1 else None))
        else:
            raise bad("prompt", PROMPT_FORMS, prompt)
    return found, end_of_text_ids(model.tokenizer)


def is_ids(value) -> bool:
    return (isinstance(value, list) and len(value) > 0
            and all(isinstance(i, int) and not isinstance(i, bool) for i in value))


def checked_ids(ids: list[int], vocab: int, index: int | None) -> list[int]:
    for id_ in ids:
        if not 0 <= id_ < vocab:
            where = "prompt" if index is None else f"prompt[{index}]"
            raise ApiError(400, f"'{where}' holds the token id {id_}, outside this model's "
                           f"vocabulary of {vocab} ids (0 to {vocab - 1})", param="prompt",
                           code="invalid_value")
    return ids


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
        kept = {key: message[key] for key in TOOL_KEYS if message.get(key) is not None}
        checked.append({"role": message["role"],
                        "content": message_text(index, message.get("content")), **kept})
    return checked


def chat_prompt(model, body: dict, budget=None, tools=None) -> tuple[list[int], list[int]]:
    """tools: given to a template that renders them (serve/tools.py), else None."""
    messages = check_messages(body.get("messages"))
    template = chat_template_of(model.tokenizer, budget)
    extra = template_kwargs(body)
    if tools is not None:
        extra["tools"] = tools
    if extra:
        template = template._replace(variables={**template.variables, **extra})
    session = ChatSession(model, template)
    return session.prompt_ids(messages), session.stop_ids()



def template_kwargs(body: dict) -> dict:
    """chat_template_kwargs: an object of variables for the template (a copy)."""
    value = body.get("chat_template_kwargs")
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise bad("chat_template_kwargs", "an object of template variables, such as "
                  "{\"enable_thinking\": false}", value)
    taken = [name for name in value if name in RESERVED or name.startswith("_")]
    if taken:
        raise bad("chat_template_kwargs", f"variables other than {', '.join(RESERVED)} and "
                  "names starting with '_'", taken[0])
    return dict(value)
