/* glassformer model page, Mixture-of-Experts models: the experts view. For one layer, each
   token's chosen experts and their mixing weights (a token x expert grid), and the layer's load
   histogram (the share of routed token-slots each expert got; the dashed line is the even share
   1/E). Reads GF.data.experts (page_data.py's experts_data); viewer.js adds the section and
   window.glassformerViewer.experts(layer) when the page has it. */
"use strict";
(function () {
const E = GF.data.experts;
if (!E) return;
const TEXT = {
  en: {
    experts: "Experts", layer: "Layer", expert: "expert", token: "token", weight: "weight",
    load: "Load", even: "even share",
    note: function (k, n) { return "A router sends each token to " + k + " of " + n + " experts (SwiGLU MLPs) and mixes their outputs with these weights. Row = token, column = expert; darker = more weight, blank = not chosen."; },
    loadNote: "The layer's load: the share of this text's routed token-slots each expert received. The dashed line is the even share 1/E that the balance loss pushes towards.",
  },
  zh: {
    experts: "专家", layer: "层", expert: "专家", token: "词元", weight: "权重",
    load: "负载", even: "平均份额",
    note: function (k, n) { return "路由器把每个词元送到 " + n + " 个专家（SwiGLU MLP）中的 " + k + " 个，再按这些权重把它们的输出加起来。行是词元，列是专家；颜色越深权重越大，空白表示没有选中。"; },
    loadNote: "这一层的负载：这段文字里被路由的词元位置中，每个专家分到的比例。虚线是平均份额 1/E，负载均衡损失把负载往这条线推。",
  },
};
function t(key) { return TEXT[GF.lang][key]; }
let shown = E.layers.length ? E.layers[0].layer : 0;

function layerData(layer) {
  const row = E.layers.find(function (entry) { return entry.layer === layer; });
  if (!row) throw new Error("layer " + layer + " has no experts in this page (a dense layer, or see --layers)");
  return row;
}
/* the page contract: [{token, id, text, experts: [ids], weights: [floats]}] in token order */
function experts(layer) {
  const row = layerData(layer);
  return row.experts.map(function (ids, position) {
    const tok = GF.data.tokens[position];
    return { token: position, id: tok.id, text: tok.text, experts: ids.slice(), weights: row.weights[position].slice() };
  });
}
function grid(row) {
  const matrix = row.experts.map(function (ids, position) {
    const cells = new Array(E.n_experts).fill(0);
    ids.forEach(function (e, j) { cells[e] = row.weights[position][j]; });
    return cells;
  });
  const labels = GF.data.tokens.map(function (tok) { return tok.text.replace(/\n/g, "↵"); });
  const columns = Array.from({ length: E.n_experts }, function (_, e) { return String(e); });
  const canvas = GF.heatmap(matrix, { colour: function (v) { return GF.blue(Math.sqrt(v)); },
    rowLabels: labels, colLabels: columns,
    describe: function (i, j, v) { return t("token") + " " + i + " " + JSON.stringify(labels[i]) + " → " + t("expert") + " " + j + "\n" + t("weight") + " " + GF.fmt(v); } });
  canvas.id = "experts-canvas";
  return canvas;
}
function histogram(row) {
  const width = Math.max(240, 36 * E.n_experts), height = 160, base = height - 22;
  const canvas = GF.el("canvas", { id: "expert-load-canvas", width: width, height: height });
  const ctx = canvas.getContext("2d");
  const top = Math.max(1 / E.n_experts, Math.max.apply(null, row.load)) * 1.15;
  const bar = width / E.n_experts;
  ctx.font = "11px system-ui";
  ctx.textAlign = "center";
  row.load.forEach(function (share, e) {
    const h = (base - 8) * share / top;
    ctx.fillStyle = GF.rgb(GF.blue(0.75));
    ctx.fillRect(e * bar + 3, base - h, bar - 6, h);
    ctx.fillStyle = "#1d2330";
    ctx.fillText(String(e), (e + 0.5) * bar, height - 8);
    ctx.fillText(Math.round(100 * share) + "%", (e + 0.5) * bar, base - h - 3);
  });
  const even = base - (base - 8) / E.n_experts / top;
  ctx.setLineDash([5, 4]); ctx.strokeStyle = "#c0392b";
  ctx.beginPath(); ctx.moveTo(0, even); ctx.lineTo(width, even); ctx.stroke();
  return canvas;
}
GF.expertsSection = function (redraw) {
  const select = GF.el("select", { id: "experts-layer" }, E.layers.map(function (entry) {
    const option = GF.el("option", { value: entry.layer, text: t("layer") + " " + entry.layer });
    if (entry.layer === shown) option.selected = true;
    return option;
  }));
  select.addEventListener("change", function () { shown = Number(select.value); redraw(); });
  const row = layerData(shown);
  return GF.el("section", { id: "experts" }, [
    GF.el("h2", { text: t("experts") + " · " + t("layer") + " " + shown }),
    GF.el("div", { class: "bar" }, [select]),
    GF.el("p", { class: "note", text: TEXT[GF.lang].note(E.k, E.n_experts) }), grid(row),
    GF.el("h3", { text: t("load") }), GF.el("p", { class: "note", text: t("loadNote") }), histogram(row)]);
};
GF.experts = experts;
})();
