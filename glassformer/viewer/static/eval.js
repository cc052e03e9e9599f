/* glassformer benchmark item page: one item of a task, each option's tokens coloured by the
   probability the model gave them, the sums acc compares and the per-character scores acc_norm
   compares. Reads GF.data (eval_page.py); exposes window.glassformerViewer (docs/viewer.md). */
"use strict";
(function () {
const D = GF.data;
const TEXT = {
  en: {
    title: "Benchmark item", task: "task", line: "line", shots: "shots", baseline: "random baseline",
    prompt: "The prompt (shared by every option)",
    promptNote: "The few-shot examples and the question. The model reads it once; each option continues from its KV cache.",
    options: "The options, token by token",
    optionsNote: "Each token's colour is the probability the model gave it after everything before it (darker = likelier). Hover for the probability and log-probability.",
    sum: "sum log p", chars: "characters", perChar: "per character",
    gold: "right answer", acc: "acc's pick (highest sum)", accNorm: "acc_norm's pick (highest per character)",
    greedy: "greedy: every token was the model's first choice", notGreedy: "not the greedy continuation",
    verdictRight: "right", verdictWrong: "wrong",
    sumsNote: "acc compares the sums: a longer option pays for every token, so sums favour short options. acc_norm divides by the option's length in characters.",
  },
  zh: {
    title: "基准测试的一道题", task: "任务", line: "行", shots: "示例数", baseline: "随机基线",
    prompt: "提示（所有选项共用）",
    promptNote: "少样本示例和问题。模型只读一次；每个选项从它的 KV 缓存接着算。",
    options: "各选项的逐个词元",
    optionsNote: "每个词元的颜色是模型在读完它之前的所有内容后给它的概率（越深越可能）。鼠标悬停查看概率和对数概率。",
    sum: "对数概率之和", chars: "字符数", perChar: "每字符",
    gold: "正确答案", acc: "acc 的选择（和最大）", accNorm: "acc_norm 的选择（每字符最大）",
    greedy: "贪心：每个词元都是模型的首选", notGreedy: "不是贪心续写",
    verdictRight: "对", verdictWrong: "错",
    sumsNote: "acc 比较的是和：选项越长，要为越多的词元付出，所以求和偏向短选项。acc_norm 除以选项的字符数。",
  },
};
function t(key) { return TEXT[GF.lang][key]; }

function tokenChip(tok, i, o) {
  const chip = GF.el("span", { class: "tok", id: "tok-" + o + "-" + i, text: tok.text });
  const c = GF.blue(Math.sqrt(tok.prob));
  chip.style.background = GF.rgb(c);
  if (tok.prob > 0.5) chip.style.color = "#fff";
  const tip = "p = " + tok.prob.toFixed(4) + "   log p = " + tok.logp.toFixed(4) + "   id " + tok.id;
  chip.addEventListener("mousemove", function (event) { GF.showTip(event, tip); });
  chip.addEventListener("mouseleave", GF.hideTip);
  return chip;
}

function marks(o) {
  const out = [];
  if (o === D.gold) out.push(t("gold"));
  if (o === D.pred) out.push(t("acc"));
  if (D.pred_norm !== null && o === D.pred_norm) out.push(t("accNorm"));
  return out.join(" · ");
}

function optionRow(option, o) {
  const head = GF.el("div", { class: "meta" }, [
    GF.el("b", { text: o + ". " + (option.context ? option.context + " → " : "") + option.text }),
    GF.el("span", { text: "   " + t("sum") + " " + option.sum.toFixed(4) + " · " + option.chars + " " + t("chars") +
      " · " + t("perChar") + " " + option.per_char.toFixed(4) }),
    GF.el("span", { class: "note", id: "marks-" + o, text: "   " + marks(o) })]);
  const chips = GF.el("div", { class: "tokens" }, option.tokens.map(function (tok, i) { return tokenChip(tok, i, o); }));
  return GF.el("div", { class: "option", id: "option-" + o, style: "margin: 6px 0 10px 0" }, [head, chips]);
}

function header() {
  const right = D.pred === D.gold ? t("verdictRight") : t("verdictWrong");
  return GF.el("header", {}, [
    GF.el("h1", { text: "glassformer · " + t("title") + " · " + D.model }),
    GF.el("div", { class: "meta", id: "item-meta", text: t("task") + " " + D.task + " · " + t("line") + " " + D.line +
      " · " + t("shots") + " " + D.shots + " · " + t("baseline") + " " + D.baseline + " · acc: " + right }),
    GF.el("div", { class: "bar" }, [GF.langBar(setLang)])]);
}

function render() {
  document.documentElement.lang = GF.lang === "zh" ? "zh-CN" : "en";
  const prompt = GF.el("section", { id: "prompt" }, [GF.el("h2", { text: t("prompt") }),
    GF.el("p", { class: "note", text: t("promptNote") }),
    GF.el("pre", { style: "white-space: pre-wrap; max-height: 18em; overflow: auto", text: D.prompt })]);
  const options = GF.el("section", { id: "options" }, [GF.el("h2", { text: t("options") }),
    GF.el("p", { class: "note", text: t("optionsNote") })].concat(D.options.map(optionRow).concat(
    [GF.el("p", { class: "note", text: t("sumsNote") })])));
  document.getElementById("app").replaceChildren(header(), GF.el("main", {}, [prompt, options]));
}
const setLang = GF.languageSetter(render);

window.glassformerViewer = {
  kind: "eval_item",
  options: function () { return D.options.map(function (o) { return o.text; }); },
  tokens: function (o) { return D.options[o].tokens.map(function (tok) { return { id: tok.id, text: tok.text, prob: tok.prob, logp: tok.logp }; }); },
  sums: function () { return D.options.map(function (o) { return o.sum; }); },
  picks: function () { return { gold: D.gold, acc: D.pred, acc_norm: D.pred_norm }; },
  setLang: setLang,
  lang: function () { return GF.lang; },
};
render();
})();
