/* glassformer constrained generation page: a reply written under a JSON schema, token by token:
   how many of the vocabulary's tokens the schema's mask allowed at each step, and the model's
   likeliest tokens there, those the mask removed struck through. Reads GF.data
   (constrained_page.py); exposes window.glassformerViewer (docs/viewer.md). */
"use strict";
(function () {
const D = GF.data;
const TEXT = {
  en: {
    title: "Constrained generation", vocab: "vocabulary", tokens: "tokens written",
    schema: "The JSON schema", prompt: "The prompt", reply: "The reply",
    replyNote: "Each token's colour is how narrow the mask was when it was chosen: darker = fewer tokens allowed (one allowed: the text was forced). Click a token to jump to its step.",
    steps: "Step by step",
    stepsNote: "At each step the schema's automaton says which tokens may come next; the mask sets every other token's logit to -inf before sampling. The candidates are the model's likeliest tokens (its own probabilities, before the mask): struck through = refused by the mask.",
    step: "step", token: "token", allowed: "allowed", candidates: "the model's top choices",
    p: "p before the mask", q: "p after the mask", forced: "forced", of: "of",
    refused: "refused by the mask",
  },
  zh: {
    title: "受约束的生成", vocab: "词表", tokens: "生成的词元",
    schema: "JSON 模式（schema）", prompt: "提示", reply: "回复",
    replyNote: "每个词元的颜色表示它被选中时掩码有多窄：越深，允许的词元越少（只允许一个：这段文字是被强制写出的）。点击词元可跳到对应的那一步。",
    steps: "逐步查看",
    stepsNote: "每一步，模式对应的自动机决定接下来可以出现哪些词元；采样之前，掩码把其余所有词元的 logit 设为 -inf。候选是模型自己最看好的词元（加掩码之前的概率）：划掉的表示被掩码拒绝。",
    step: "步", token: "词元", allowed: "允许", candidates: "模型的首选",
    p: "掩码前的概率", q: "掩码后的概率", forced: "强制", of: "/",
    refused: "被掩码拒绝",
  },
};
function t(key) { return TEXT[GF.lang][key]; }

/* darker for a narrower mask: 1 allowed -> 1, every token allowed -> 0 (log scale) */
function narrowness(allowed) {
  return 1 - Math.log(Math.max(allowed, 1)) / Math.log(Math.max(D.vocab, 2));
}

/* whitespace made visible: a newline, a tab, a space */
function shown(text) { return text.replace(/\n/g, "↵").replace(/\t/g, "⇥").replace(/ /g, "␣"); }

function replyChip(step, i) {
  const chip = GF.el("span", { class: "tok", id: "tok-" + i, text: step.text });
  const c = GF.blue(narrowness(step.allowed));
  chip.style.background = GF.rgb(c);
  if (narrowness(step.allowed) > 0.6) chip.style.color = "#fff";
  const tip = t("step") + " " + i + " · " + t("allowed") + " " + step.allowed.toLocaleString() + " " + t("of") + " " +
    D.vocab.toLocaleString() + " · p " + step.p.toFixed(4) + " → " + step.q.toFixed(4);
  chip.addEventListener("mousemove", function (event) { GF.showTip(event, tip); });
  chip.addEventListener("mouseleave", GF.hideTip);
  chip.addEventListener("click", function () {
    const row = document.getElementById("step-" + i);
    if (row.scrollIntoView) row.scrollIntoView({ block: "center" });
    document.querySelectorAll("tr.sel").forEach(function (r) { r.classList.remove("sel"); });
    row.classList.add("sel");
  });
  return chip;
}

function candidate(c, chosen) {
  const label = shown(c.text) + " " + c.p.toFixed(3);
  const node = c.allowed ? GF.el("span", { class: "cand", text: label })
    : GF.el("s", { class: "cand refused", title: t("refused"), text: label });
  node.setAttribute("data-id", String(c.id));
  if (c.id === chosen) node.style.fontWeight = "bold";
  if (!c.allowed) node.style.color = "#b33";
  node.style.whiteSpace = "pre";
  node.style.marginRight = "10px";
  return node;
}

function stepRow(step, i) {
  const allowed = step.allowed === 1 ? "1 (" + t("forced") + ")" : step.allowed.toLocaleString();
  return GF.el("tr", { id: "step-" + i }, [
    GF.el("td", { text: String(i) }),
    GF.el("td", {}, [GF.el("span", { class: "tok", style: "background: var(--pad)", text: shown(step.text) })]),
    GF.el("td", { class: "allowed", style: "text-align: right", text: allowed }),
    GF.el("td", { style: "text-align: right", text: step.p.toFixed(4) }),
    GF.el("td", { style: "text-align: right", text: step.q.toFixed(4) }),
    GF.el("td", { class: "cands", style: "white-space: normal" }, step.top.map(function (c) { return candidate(c, step.id); }))]);
}

function header() {
  return GF.el("header", {}, [
    GF.el("h1", { text: "glassformer · " + t("title") + " · " + D.model }),
    GF.el("div", { class: "meta", id: "gen-meta", text: t("vocab") + " " + D.vocab.toLocaleString() + " · " +
      t("tokens") + " " + D.steps.length }),
    GF.el("div", { class: "bar" }, [GF.langBar(setLang)])]);
}

function block(id, title, text) {
  return GF.el("section", { id: id }, [GF.el("h2", { text: title }),
    GF.el("pre", { style: "white-space: pre-wrap; max-height: 16em; overflow: auto", text: text })]);
}

function render() {
  document.documentElement.lang = GF.lang === "zh" ? "zh-CN" : "en";
  const reply = GF.el("section", { id: "reply" }, [GF.el("h2", { text: t("reply") }),
    GF.el("p", { class: "note", text: t("replyNote") }),
    GF.el("div", { class: "tokens" }, D.steps.map(replyChip))]);
  const head = GF.el("tr", {}, ["step", "token", "allowed", "p", "q", "candidates"].map(function (key) {
    return GF.el("th", { text: t(key) });
  }));
  const steps = GF.el("section", { id: "steps" }, [GF.el("h2", { text: t("steps") }),
    GF.el("p", { class: "note", text: t("stepsNote") }),
    GF.el("table", { class: "lens", id: "step-table" }, [GF.el("thead", {}, [head]),
      GF.el("tbody", {}, D.steps.map(stepRow))])]);
  document.getElementById("app").replaceChildren(header(), GF.el("main", {}, [
    block("schema", t("schema"), D.schema), block("prompt", t("prompt"), D.prompt), reply, steps]));
}
const setLang = GF.languageSetter(render);

window.glassformerViewer = {
  kind: "constrained",
  reply: function () { return D.reply; },
  steps: function () { return D.steps.map(function (s) { return { id: s.id, text: s.text, allowed: s.allowed, p: s.p, q: s.q }; }); },
  candidates: function (i) { return D.steps[i].top.map(function (c) { return { id: c.id, text: c.text, p: c.p, allowed: c.allowed }; }); },
  struck: function (i) {
    return Array.from(document.querySelectorAll("#step-" + i + " s.refused")).map(function (s) { return Number(s.getAttribute("data-id")); });
  },
  setLang: setLang,
  lang: function () { return GF.lang; },
};
render();
})();
