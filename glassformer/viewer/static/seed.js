/* glassformer seed page: the §1.2 self-attention walkthrough, causal and bidirectional side by
   side, forward then backward, in English or Chinese. Reads GF.data (seed_page.py); exposes
   window.glassformerViewer (attention(0, 0) is the causal weights; pass "bidirectional" third).
   An explain trace (viewer/trace.py) is the same page with one column: its part's steps. */
"use strict";
(function () {
const D = GF.data;
const UI = { en: { backward: "Backward pass", weights: "weights" }, zh: { backward: "反向传播", weights: "权重" } };
const NEG = -1e8;        /* explain's JSON writes a masked -inf as -1e9 */

function matrixOf(value) {     /* a 2-D view of a step's value: (1, T, S) -> (T, S), (B, H, T, S) -> item 0, head 0 */
  if (typeof value === "number" || typeof value === "boolean") return [[value]];
  if (!Array.isArray(value[0])) return [value];
  while (Array.isArray(value[0][0])) value = value[0];
  return value;
}
function cellText(v) {
  if (typeof v === "boolean") return v ? "True" : "False";
  if (typeof v === "string") return v;
  if (typeof v === "object") return JSON.stringify(v);
  if (v <= NEG) return "-inf";
  return Math.abs(v) < 1e-3 && v !== 0 ? v.toExponential(3) : v.toFixed(4);
}
function table(value) {
  return GF.el("table", { class: "matrix" }, matrixOf(value).map(function (row) {
    return GF.el("tr", {}, row.map(function (v) { return GF.el("td", { text: cellText(v) }); }));
  }));
}
function stepBlock(step, mode) {
  const parts = [GF.el("h3", { text: step.key }), GF.el("div", { class: "algebra", text: step.algebra }),
    GF.el("p", { class: "note", text: step.text[GF.lang] }), table(step.value)];
  if (step.key === "weights") {
    const canvas = GF.heatmap(matrixOf(step.value), { cell: 34, colour: GF.blue,
      describe: function (i, j, v) { return UI[GF.lang].weights + "[" + i + "," + j + "] = " + GF.fmt(v); } });
    canvas.id = "weights-" + mode;
    parts.push(canvas);
  }
  return GF.el("div", { class: "step", id: mode + "-" + step.key }, parts);
}
function column(mode) {
  const m = D.modes[mode];
  const backward = m.backward.length ? [GF.el("h2", { text: m.backward_heading[GF.lang] })] : [];
  return GF.el("div", { id: "mode-" + mode }, [GF.el("h2", { text: m.heading[GF.lang] })]
    .concat(m.forward.map(function (s) { return stepBlock(s, mode); }))
    .concat(backward)
    .concat(m.backward.map(function (s) { return stepBlock(s, mode + "-d"); })));
}
const MODES = Object.keys(D.modes);      /* seed: causal, bidirectional; a trace: its part */
function render() {
  document.documentElement.lang = GF.lang === "zh" ? "zh-CN" : "en";
  document.title = D.title[GF.lang];
  const app = document.getElementById("app");
  app.replaceChildren(
    GF.el("header", {}, [GF.el("h1", { text: D.title[GF.lang] }),
      GF.el("div", { class: "meta", text: D.compare[GF.lang] }), GF.el("div", { class: "bar" }, [GF.langBar(setLang)])]),
    GF.el("main", {}, [GF.el("section", {}, [GF.el("div", { class: "side" }, MODES.map(column))])]));
}
const setLang = GF.languageSetter(render);
function weights(mode) {                /* (T, S) weights of batch item 0 (and head 0), or null */
  const step = D.modes[mode].forward.find(function (s) { return s.key === "weights"; });
  return step ? matrixOf(step.value) : null;
}
const T = weights(MODES[0]) ? weights(MODES[0]).length : 0;
window.glassformerViewer = {
  kind: D.kind,            /* "seed", or "trace" for an explain trace */
  tokens: function () { const out = []; for (let i = 0; i < T; i++) out.push({ id: i, text: "token " + i }); return out; },
  groups: function () { const out = []; for (let i = 0; i < T; i++) out.push({ text: "token " + i, tokens: [i] }); return out; },
  layers: function () { return [0]; },
  heads: function () { return [0]; },
  attention: function (layer, head, mode) {
    if (layer !== 0 || head !== 0) throw new Error("the seed has one layer and one head");
    return weights(mode || MODES[0]).map(function (row) { return row.slice(); });
  },
  logitLens: function () { return null; },
  setLang: setLang,
  lang: function () { return GF.lang; },
};
render();
})();
