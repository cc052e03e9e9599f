"""Tools: `tools` and `tool_choice` of a chat request, and tool calls read back from a reply.

A template that renders `tools` (it names the variable, as transformers passes it) gets them as
they are. A template without (SmolLM2's) gets the generic format of llama.cpp's server:

    system turn   "You can call any of the following tools ... {tools as JSON} ... Respond in
                  JSON format, either with `tool_call` (a request to call tools) or with
                  `response` reply to the user's request"
    reply         constrained (generate/constrain/) to {"tool_call": {"name": N, "arguments":
                  {...N's parameters}}} or, with tool_choice "auto", {"response": "text"}
    earlier turns an assistant's tool_calls are written back as that JSON, a role "tool"
                  message as a user turn {"tool_response": {"tool": name, "content": ...}}

tool_choice: "none" (no tools offered, a plain reply; earlier calls still written back), "auto"
(a call or an answer), "required" (a call), {"type": "function", "function": {"name": N}}
(a call of N). A call comes back as message.tool_calls [{id, type "function", function {name,
arguments: a JSON string}}] with finish_reason "tool_calls".
"""
from __future__ import annotations

import json
import secrets
from typing import NamedTuple

from glassformer.errors import GlassformerError
from glassformer.generate.constrain import compile_schema
from glassformer.serve.protocol import ApiError, bad

MAX_TOOLS = 64
NO_PARAMETERS = {"type": "object", "properties": {}, "additionalProperties": False}
INSTRUCTION = ("Respond in JSON format, either with `tool_call` (a request to call tools) or "
               "with `response` reply to the user's request")


class ToolPlan(NamedTuple):
    tools: list              # OpenAI's tool objects, checked
    choice: str              # "auto", "required" or the name of the one function to call
    native: bool             # the template renders `tools` itself (no constraint, no system text)
    schema: dict | None      # the reply's JSON schema (generic format)


def tool_plan(body: dict, template_source: str) -> ToolPlan | None:
    """The request's tools and choice, checked (None: no tools)."""
    tools = body.get("tools")
    choice = body.get("tool_choice")
    if tools is None:
        if choice not in (None, "none", "auto"):
            raise bad("tool_choice", "absent without 'tools'", choice)
        return None
    if not isinstance(tools, list) or not tools or len(tools) > MAX_TOOLS:
        raise bad("tools", f"a list of 1 to {MAX_TOOLS} function tools", tools)
    functions = [checked_tool(index, tool) for index, tool in enumerate(tools)]
    names = [f["name"] for f in functions]
    choice = checked_choice(choice, names)
    native = "tools" in template_source
    schema = None if native or choice == "none" else reply_schema(functions, choice)
    return ToolPlan(tools, choice, native, schema)


def checked_tool(index: int, tool) -> dict:
    where = f"tools[{index}]"
    if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(
            tool.get("function"), dict) or not isinstance(tool["function"].get("name"), str):
        raise bad(where, 'an object {"type": "function", "function": {"name", "parameters"}}',
                  tool)
    function = tool["function"]
    parameters = function.get("parameters", NO_PARAMETERS)
    try:
        compile_schema(parameters)
    except (GlassformerError, RecursionError) as err:
        raise ApiError(400, f"'{where}.function.parameters' is not a supported JSON schema: "
                       f"{err}", param="tools", code="invalid_schema") from None
    return {"name": function["name"], "parameters": parameters}


def checked_choice(choice, names: list[str]) -> str:
    if choice is None:
        return "auto"
    if choice in ("none", "auto", "required"):
        return choice
    if isinstance(choice, dict) and choice.get("type") == "function" and isinstance(
            choice.get("function"), dict) and choice["function"].get("name") in names:
        return choice["function"]["name"]
    raise bad("tool_choice", f"none, auto, required or {{\"type\": \"function\", \"function\": "
              f"{{\"name\": one of {names}}}}}", choice)


def reply_schema(functions: list[dict], choice: str) -> dict:
    """The generic format's reply: a call (of any tool, or the one named) or, for auto, an
    answer."""
    calls = [{"type": "object", "properties": {"name": {"const": f["name"]},
                                               "arguments": f["parameters"]},
              "required": ["name", "arguments"], "additionalProperties": False}
             for f in functions if choice in ("auto", "required", f["name"])]
    call = {"type": "object", "properties": {
        "tool_call": calls[0] if len(calls) == 1 else {"anyOf": calls}},
        "required": ["tool_call"], "additionalProperties": False}
    if choice != "auto":
        return call
    answer = {"type": "object", "properties": {"response": {"type": "string"}},
              "required": ["response"], "additionalProperties": False}
    return {"anyOf": [call, answer]}


def tool_messages(messages, plan: ToolPlan) -> list:
    """The conversation the template renders: in the generic format, the tools in the system
    turn and earlier calls and tool replies written as the JSON the model reads."""
    if not isinstance(messages, list) or plan.native:
        return messages
    found = [message_back(m) for m in messages]
    if plan.choice == "none":
        return found
    tools = json.dumps(plan.tools, indent=2, ensure_ascii=False)
    text = (f"You can call any of the following tools to satisfy the user's requests: {tools}"
            "\n\nExample tool call syntax:\n\n{\"tool_call\": {\"name\": \"tool_name\", "
            "\"arguments\": {\"arg1\": \"some_value\"}}}\n\n" + INSTRUCTION)
    if found and isinstance(found[0], dict) and found[0].get("role") == "system":
        return [{"role": "system", "content": f"{found[0].get('content') or ''}\n\n{text}"
                 .lstrip()}] + found[1:]
    return [{"role": "system", "content": text}] + found


def message_back(message):
    """An assistant's tool_calls and a role "tool" message as the generic format's JSON."""
    if not isinstance(message, dict):
        return message
    if message.get("role") == "assistant" and message.get("tool_calls"):
        calls = message["tool_calls"]
        first = calls[0].get("function", {}) if isinstance(calls, list) and calls and \
            isinstance(calls[0], dict) else {}
        try:
            arguments = json.loads(first.get("arguments") or "{}")
        except (TypeError, ValueError):
            arguments = first.get("arguments")
        call = {"tool_call": {"name": first.get("name"), "arguments": arguments}}
        return {"role": "assistant", "content": json.dumps(call, ensure_ascii=False)}
    if message.get("role") == "tool":
        reply = {"tool_response": {"tool": message.get("name") or message.get("tool_call_id"),
                                   "content": message.get("content")}}
        return {"role": "user", "content": json.dumps(reply, ensure_ascii=False)}
    return message


class ReadReply(NamedTuple):
    content: str | None
    calls: list              # OpenAI tool_calls (empty: a plain answer)


def read_reply(text: str, plan: ToolPlan, reason: str) -> ReadReply:
    """A finished reply's text -> its answer or its tool call (a reply cut by max_tokens, or a
    native template's free text, is kept as content)."""
    if plan.native or plan.schema is None or reason != "stop":
        return ReadReply(text, native_calls(text) if plan.native else [])
    value = json.loads(text)
    if "response" in value:
        return ReadReply(value["response"], [])
    call = value["tool_call"]
    return ReadReply(None, [tool_call(call["name"], call["arguments"])])


def native_calls(text: str) -> list:
    """Hermes' <tool_call>{"name", "arguments"}</tool_call> blocks in a native template's reply."""
    calls = []
    for block in text.split("<tool_call>")[1:]:
        try:
            call = json.loads(block.split("</tool_call>")[0])
            calls.append(tool_call(call["name"], call.get("arguments", {})))
        except (ValueError, KeyError, TypeError):
            continue
    return calls


def tool_call(name: str, arguments) -> dict:
    return {"id": f"call_{secrets.token_hex(12)}", "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments, ensure_ascii=False)}}
