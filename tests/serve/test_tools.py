"""tools and tool_choice: checked plans, llama.cpp's generic format for SmolLM2 (no tools in its
template), and on the real model (slow): tool_choice "required" gives calls whose arguments
validate (50 sampled), a two-turn conversation with a role "tool" reply renders and answers, and
streamed delta.tool_calls reassemble to the whole reply's."""
import json

import jsonschema
import openai
import pytest
from serve_process import start_server

from glassformer.errors import GlassformerError
from glassformer.generate.constrain import compile_schema
from glassformer.packaged import MODEL, packaged_path
from glassformer.serve.protocol import ApiError
from glassformer.serve.tools import read_reply, tool_messages, tool_plan

PARAMETERS = {"type": "object", "properties": {
    "city": {"type": "string", "maxLength": 20}, "unit": {"type": "string", "enum": ["C", "F"]}},
    "required": ["city", "unit"], "additionalProperties": False}
WEATHER = {"type": "function", "function": {"name": "get_weather", "description":
                                            "The weather of a city", "parameters": PARAMETERS}}
TIME = {"type": "function", "function": {"name": "get_time", "parameters": {
    "type": "object", "properties": {"zone": {"type": "string", "maxLength": 10}},
    "required": ["zone"], "additionalProperties": False}}}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


def test_plans():
    assert tool_plan({}, "") is None
    plan = tool_plan({"tools": [WEATHER, TIME], "tool_choice": "required"}, "")
    assert not plan.native and compile_schema(plan.schema)
    assert "response" not in json.dumps(plan.schema)
    auto = tool_plan({"tools": [WEATHER]}, "")
    assert auto.choice == "auto" and "response" in json.dumps(auto.schema)
    named = tool_plan({"tools": [WEATHER, TIME], "tool_choice": {
        "type": "function", "function": {"name": "get_time"}}}, "")
    assert "get_weather" not in json.dumps(named.schema)
    assert tool_plan({"tools": [WEATHER], "tool_choice": "none"}, "").schema is None
    native = tool_plan({"tools": [WEATHER]}, "{% for tool in tools %}{% endfor %}")
    assert native.native and native.schema is None


@pytest.mark.parametrize("body, param", [
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"x": {"type": "string", "format": "uri"}}}}}]}, "tools"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": 3}}]}, "tools"),
    ({"tools": "f"}, "tools"),
    ({"tools": [WEATHER], "tool_choice": {"type": "function", "function": {"name": "nope"}}},
     "tool_choice"),
    ({"tool_choice": "required"}, "tool_choice"),
])
def test_bad_tools_are_400(body, param):
    with pytest.raises(ApiError) as err:
        tool_plan(body, "")
    assert err.value.status == 400 and err.value.param == param


def test_generic_messages_and_replies():
    plan = tool_plan({"tools": [WEATHER]}, "")
    call = {"id": "call_1", "type": "function", "function": {"name": "get_weather",
                                                             "arguments": '{"city": "Paris"}'}}
    turns = tool_messages(ASK + [{"role": "assistant", "content": None, "tool_calls": [call]},
                                 {"role": "tool", "tool_call_id": "call_1", "content": "18 C"}],
                          plan)
    assert turns[0]["role"] == "system" and "get_weather" in turns[0]["content"]
    assert json.loads(turns[2]["content"]) == {"tool_call": {"name": "get_weather",
                                                             "arguments": {"city": "Paris"}}}
    assert turns[3]["role"] == "user" and "tool_response" in turns[3]["content"]
    read = read_reply('{"tool_call":{"name":"get_weather","arguments":{"city":"Oslo",'
                      '"unit":"C"}}}', plan, "stop")
    assert read.content is None and read.calls[0]["function"]["name"] == "get_weather"
    assert json.loads(read.calls[0]["function"]["arguments"]) == {"city": "Oslo", "unit": "C"}
    assert read_reply('{"response":"hi"}', plan, "stop") == ("hi", [])
    assert read_reply('{"tool_c', plan, "length") == ('{"tool_c', [])


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    try:
        packaged_path("smollm2", MODEL)
    except GlassformerError as err:
        pytest.skip(str(err))
    server = start_server("smollm2", tmp_path_factory.mktemp("tools"), "--max-batch", "5",
                          "--context", "1024")
    yield openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0,
                        timeout=600.0)
    assert server.stop() == 0


@pytest.mark.slow
def test_required_calls_validate(api):
    calls = 0
    for seed in range(10):                                   # 10 requests x 5 choices = 50
        reply = api.chat.completions.create(model="smollm2", messages=ASK, tools=[WEATHER],
                                            tool_choice="required", temperature=1.0, n=5,
                                            seed=seed, max_tokens=64)
        for choice in reply.choices:
            assert choice.finish_reason == "tool_calls"
            call = choice.message.tool_calls[0]
            assert call.function.name == "get_weather" and call.id.startswith("call_")
            jsonschema.validate(json.loads(call.function.arguments), PARAMETERS)
            calls += 1
    assert calls == 50


@pytest.mark.slow
def test_two_turns_and_streamed_calls(api):
    first = api.chat.completions.create(model="smollm2", messages=ASK, tools=[WEATHER],
                                        tool_choice="required", temperature=0, max_tokens=64)
    call = first.choices[0].message.tool_calls[0]
    streamed = api.chat.completions.create(model="smollm2", messages=ASK, tools=[WEATHER],
                                           tool_choice="required", temperature=0,
                                           max_tokens=64, stream=True)
    parts, reasons = {}, []
    for chunk in streamed:
        for piece in chunk.choices[0].delta.tool_calls or []:
            found = parts.setdefault(piece.index, {"id": None, "name": "", "arguments": ""})
            found["id"] = piece.id or found["id"]
            found["name"] += piece.function.name or ""
            found["arguments"] += piece.function.arguments or ""
        reasons.append(chunk.choices[0].finish_reason)
    assert reasons[-1] == "tool_calls"
    assert (parts[0]["name"], parts[0]["arguments"]) == (call.function.name,
                                                         call.function.arguments)
    turns = ASK + [{"role": "assistant", "content": None, "tool_calls": [call.model_dump()]},
                   {"role": "tool", "tool_call_id": call.id, "content": "18 C and sunny"}]
    second = api.chat.completions.create(model="smollm2", messages=turns, tools=[WEATHER],
                                         temperature=0, max_tokens=64)
    choice = second.choices[0]
    assert choice.finish_reason in ("stop", "tool_calls")
    if choice.finish_reason == "stop":
        assert choice.message.content
    plain = api.chat.completions.create(model="smollm2", messages=turns, tools=[WEATHER],
                                        tool_choice="none", temperature=0, max_tokens=16)
    assert plain.choices[0].message.content and not plain.choices[0].message.tool_calls
