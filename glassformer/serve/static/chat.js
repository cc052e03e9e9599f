// The chat page of `glassformer serve`: streams /v1/chat/completions with logprobs and draws
// each reply token as a <span class="token" data-p="..."> tinted by its probability; hovering
// one shows its top-5 alternatives. Everything it fetches comes from the server that sent it.
// Two modes: "chat" (messages, the model's chat template) and "complete" (the typed text is a
// prompt that /v1/completions continues); the server picks the first one from the model
// (body's data-mode: "complete" when it has no chat template), the #mode select switches.
"use strict";
(function () {
  const TOP = 5;                       // alternatives per token (top_logprobs)
  const log = document.getElementById("log");
  const input = document.getElementById("input");
  const keyField = document.getElementById("key");
  const tip = document.getElementById("tip");
  const model = document.getElementById("model").textContent;
  const modeField = document.getElementById("mode");
  const PLACEHOLDER = {
    chat: "Message… Enter sends, Shift+Enter new line · 输入消息，Enter 发送",
    complete: "Text to continue… Enter sends, Shift+Enter new line · 输入要续写的文本，Enter 发送",
  };
  let messages = [];                   // the conversation, as the API takes it
  let busy = false;

  function setMode(mode) {
    document.body.dataset.mode = mode;
    modeField.value = mode;
    input.placeholder = PLACEHOLDER[mode];
  }
  setMode(document.body.dataset.mode === "complete" ? "complete" : "chat");
  document.getElementById("no-template").hidden = document.body.dataset.chat !== "false";
  modeField.addEventListener("change", () => {
    setMode(modeField.value);
    messages = [];
    log.replaceChildren();
  });

  keyField.value = new URLSearchParams(location.search).get("api_key") || "";

  function bubble(role, text) {
    const div = document.createElement("div");
    div.className = "message " + role;
    div.textContent = text;
    log.appendChild(div);
    log.scrollTop = log.scrollHeight;
    return div;
  }

  // probability 0 -> red, 1 -> green; light enough to read the text on
  function tint(p) {
    return "hsla(" + Math.round(120 * p) + ", 75%, 55%, " + (0.18 + 0.35 * (1 - p)) + ")";
  }

  // One chunk's text, as one span: its probability is that of its tokens together (one token
  // but for a character cut across several, such as some Chinese ones).
  function addToken(reply, text, tokens, thinking) {
    const span = document.createElement("span");
    span.className = thinking ? "token thinking" : "token";
    span.textContent = text;
    const logprob = tokens.reduce((sum, t) => sum + t.logprob, 0);
    const p = Math.exp(logprob);
    span.dataset.p = p.toPrecision(4);
    span.dataset.top = JSON.stringify(tokens[tokens.length - 1].top_logprobs.map(
      (t) => [t.token, Math.exp(t.logprob)]));
    span.style.background = tint(p);
    reply.appendChild(span);
  }

  function showTip(span) {
    const rows = JSON.parse(span.dataset.top);
    const table = document.createElement("table");
    for (const [token, p] of rows) {
      const tr = table.insertRow();
      tr.insertCell().textContent = JSON.stringify(token);
      const cell = tr.insertCell();
      cell.className = "p";
      cell.textContent = (100 * p).toFixed(1) + "%";
    }
    tip.replaceChildren(table);
    const box = span.getBoundingClientRect();
    tip.style.left = box.left + "px";
    tip.style.top = (box.bottom + 4) + "px";
    tip.hidden = false;
  }

  log.addEventListener("mouseover", (event) => {
    if (event.target.classList.contains("token")) showTip(event.target);
  });
  log.addEventListener("mouseout", (event) => {
    if (event.target.classList.contains("token")) tip.hidden = true;
  });

  function headers() {
    const h = { "Content-Type": "application/json" };
    if (keyField.value) h.Authorization = "Bearer " + keyField.value;
    return h;
  }

  function temperature() {
    const value = parseFloat(document.getElementById("temperature").value);
    return isNaN(value) ? 0.7 : value;
  }

  function chatRequest() {
    return {
      // no max_completion_tokens: a reply may take what the context leaves
      model: model, messages: messages, stream: true, logprobs: true, top_logprobs: TOP,
      temperature: temperature(), stream_options: { include_usage: true },
    };
  }

  function completionRequest(prompt) {
    const limit = parseInt(document.getElementById("max-tokens").value, 10);
    return {
      model: model, prompt: prompt, stream: true, logprobs: TOP, temperature: temperature(),
      max_tokens: isNaN(limit) || limit < 1 ? 64 : limit, stream_options: { include_usage: true },
    };
  }

  // A chunk's choice as {text, tokens}: tokens in chat's logprobs shape, whichever route sent it
  // (/v1/completions lists parallel arrays and each token's alternatives as an object).
  // (a reasoning model's thinking comes as delta.reasoning: drawn too, kept out of messages)
  function chatPiece(choice) {
    const delta = choice.delta;
    return { text: delta.content || delta.reasoning || "", thinking: "reasoning" in delta,
             tokens: choice.logprobs ? choice.logprobs.content : [] };
  }

  function completionPiece(choice) {
    const lp = choice.logprobs;
    const tokens = !lp ? [] : lp.tokens.map((_, i) => ({
      logprob: lp.token_logprobs[i],
      top_logprobs: Object.entries(lp.top_logprobs[i] || {})
        .map(([token, logprob]) => ({ token: token, logprob: logprob }))
        .sort((a, b) => b.logprob - a.logprob),
    }));
    return { text: choice.text || "", tokens: tokens };
  }

  // Feed one "data: ..." event; returns false at [DONE].
  function onEvent(data, reply, state, piece) {
    if (data === "[DONE]") return false;
    const chunk = JSON.parse(data);
    if (chunk.error) throw new Error(chunk.error.message);
    if (chunk.usage) {
      const u = chunk.usage;
      state.usage = u.prompt_tokens + " prompt tokens (" + u.prompt_tokens_details.cached_tokens +
        " cached) · " + u.completion_tokens + " reply tokens";
    }
    for (const choice of chunk.choices) {
      const got = piece(choice);
      const text = got.text;
      // a token that ends inside a character brings no text yet: it joins the next span
      const tokens = state.carried.concat(got.tokens);
      state.carried = text ? [] : tokens;
      if (text && tokens.length) addToken(reply, text, tokens, got.thinking);
      if (!got.thinking) state.text += text;
    }
    return true;
  }

  async function stream(response, reply, piece) {
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    const state = { text: "", usage: "", carried: [] };
    let pending = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      pending += decoder.decode(value, { stream: true });
      const events = pending.split("\n\n");
      pending = events.pop();
      for (const event of events) {
        if (event.startsWith("data: ") && !onEvent(event.slice(6), reply, state, piece)) return state;
      }
    }
    return state;
  }

  // POST body to url and stream the reply into `reply`; the state (text, usage) at the end.
  async function ask(url, body, reply, piece) {
    const response = await fetch(url, {
      method: "POST", headers: headers(), body: JSON.stringify(body),
    });
    if (!response.ok) {
      const answer = await response.json();
      throw new Error(response.status + ": " + answer.error.message);
    }
    const state = await stream(response, reply, piece);
    const usage = document.createElement("span");
    usage.className = "usage";
    usage.textContent = state.usage;
    reply.appendChild(usage);
    reply.classList.add("done");
    return state;
  }

  function failed(reply, err) {
    const line = document.createElement("span");
    line.className = "error";
    line.textContent = String(err.message || err);
    reply.appendChild(line);
    reply.classList.add("done", "failed");
  }

  async function chat(text) {
    bubble("user", text);
    messages.push({ role: "user", content: text });
    const reply = bubble("assistant", "");
    try {
      const state = await ask("/v1/chat/completions", chatRequest(), reply, chatPiece);
      messages.push({ role: "assistant", content: state.text });
    } catch (err) {
      messages.pop();
      failed(reply, err);
    }
  }

  // complete mode: the typed text (bold) and its continuation's tokens in one block
  async function complete(text) {
    const block = bubble("completion", "");
    const prompt = document.createElement("span");
    prompt.className = "prompt";
    prompt.textContent = text;
    block.appendChild(prompt);
    try {
      await ask("/v1/completions", completionRequest(text), block, completionPiece);
    } catch (err) {
      failed(block, err);
    }
  }

  async function send(text) {
    if (busy || !text.trim()) return;
    busy = true;
    try {
      await (document.body.dataset.mode === "complete" ? complete(text) : chat(text));
    } finally {
      busy = false;
    }
  }

  input.addEventListener("keydown", (event) => {
    // note: while an input method composes (Chinese pinyin), Enter picks a word: not a send
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      const text = input.value;
      input.value = "";
      send(text);
    }
  });
  document.getElementById("reset").addEventListener("click", () => {
    messages = [];
    log.replaceChildren();
  });
  window.glassformerChat = { send: send, setMode: setMode };
})();
