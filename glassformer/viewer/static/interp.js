/* glassformer interpretability page: a patching heat-map (layers x positions, or heads), a
   logit-attribution bar chart and grid (every head and MLP), head-score grids (induction,
   previous-token, duplicate-token) and an SAE's features (top contexts, logit effect).
   Each is a section drawn only when GF.data holds it (interp_page.py, sae_page.py); exposes
   window.glassformerViewer (docs/viewer.md). */
"use strict";
(function () {
const D = GF.data;
const TEXT = {
  en: {
    title: "Looking inside", patching: "Activation patching", estimate: "Attribution patching (first-order estimate)",
    patchNote: "Run the corrupted prompt, put back one activation from the clean run, and see how much of the answer returns. Each cell: (patched − corrupted) / (clean − corrupted); 1 = the clean answer fully restored (blue), 0 = nothing (white), negative = red.",
    clean: "clean", corrupt: "corrupted", metric: "logit difference", peak: "peak", layer: "layer",
    position: "position", head: "head", raw: "metric",
    attribution: "Direct logit attribution", attrNote: "The last position's residual stream is a sum of what the embeddings, every head and every MLP wrote. Through the final norm's scale, each term's share of the logit (difference) is one dot product; the shares add up to the logit.",
    logit: "logit (difference)", sum: "sum of the terms", topTerms: "The largest terms", grid: "Every head and MLP (layers × heads, last column the MLP)",
    heads: "Head scores", headsNote: "On [BOS] + r + r (r: random tokens). Each score is the mean weight a head puts on one diagonal stripe: previous-token (the token before), duplicate-token (the same token in the first copy), induction (the token after it: what came next last time).",
    above: "above", none: "none", tokensPerCopy: "random tokens per copy", rows: "rows", seed: "seed",
    induction: "induction", previous_token: "previous-token", duplicate_token: "duplicate-token",
    sae: "Sparse autoencoder features", saeNote: "Each feature: the contexts of the text where it fires most (each token tinted by the feature's activation there), and its logit effect: its decoder row through the final norm's weight and the unembedding, the tokens it pushes up and down directly.",
    feature: "feature", density: "fires on", maxAct: "largest activation", contexts: "Top activating contexts",
    raises: "Raises", lowers: "Lowers", positions: "positions", l0: "L0 (features per position)",
  },
  zh: {
    title: "看进模型内部", patching: "激活修补（activation patching）", estimate: "归因修补（一阶估计）",
    patchNote: "运行被破坏的提示，把其中一个激活换回干净运行时的值，看答案恢复了多少。每格：(修补后 − 破坏后) / (干净 − 破坏后)；1 表示干净的答案完全恢复（蓝），0 表示毫无恢复（白），负值为红。",
    clean: "干净", corrupt: "破坏后", metric: "logit 差", peak: "峰值", layer: "层",
    position: "位置", head: "头", raw: "指标",
    attribution: "直接 logit 归因", attrNote: "最后一个位置的残差流是嵌入、每个注意力头和每个 MLP 写入之和。按最终归一化的缩放，每一项对 logit（差）的贡献就是一次点积；所有贡献加起来正是这个 logit。",
    logit: "logit（差）", sum: "各项之和", topTerms: "贡献最大的项", grid: "每个头和 MLP（层 × 头，最后一列是 MLP）",
    heads: "注意力头得分", headsNote: "输入为 [BOS] + r + r（r 是随机词元）。得分是一个头在注意力矩阵某条对角线上的平均权重：前一词元头（看前一个词元）、重复词元头（看第一遍里同一个词元）、归纳头（看它后面那个词元：上次接下来出现的词元）。",
    above: "超过", none: "无", tokensPerCopy: "每遍随机词元数", rows: "行", seed: "种子",
    induction: "归纳头", previous_token: "前一词元头", duplicate_token: "重复词元头",
    sae: "稀疏自编码器的特征", saeNote: "每个特征：文本中它激活最强的上下文（每个词元按该特征在那里的激活值着色），以及它的 logit 效应：它的解码器向量经过最终归一化的权重和反嵌入矩阵，直接推高、压低的词元。",
    feature: "特征", density: "激活比例", maxAct: "最大激活值", contexts: "激活最强的上下文",
    raises: "推高", lowers: "压低", positions: "个位置", l0: "L0（每个位置激活的特征数）",
  },
};
function t(key) { return TEXT[GF.lang][key] || key; }
let shownFeature = D.sae && D.sae.features.length ? 0 : null;

function orange(v) {   /* white -> orange for an activation share in [0, 1] */
  const x = Math.max(0, Math.min(1, v));
  return [255, Math.round(255 - 110 * x), Math.round(255 - 200 * x)];
}

function patchingSection() {
  const P = D.patching;
  const parts = [GF.el("h2", { text: P.estimate ? t("estimate") : t("patching") }),
    GF.el("p", { class: "note", text: t("patchNote") }),
    GF.el("div", { class: "meta", id: "patch-prompts", text: t("clean") + ": " + P.clean_text + "   ·   " +
      t("corrupt") + ": " + P.corrupt_text }),
    GF.el("div", { class: "meta", text: t("metric") + " " + JSON.stringify(P.target) + " − " + JSON.stringify(P.other) +
      ": " + t("clean") + " " + GF.fmt(P.clean, 3) + ", " + t("corrupt") + " " + GF.fmt(P.corrupt, 3) })];
  P.tables.forEach(function (table) {
    const byHead = table.columns === "head";
    const cols = byHead ? table.normalised[0].map(function (_, h) { return "H" + h; }) : P.tokens;
    const rows = table.normalised.map(function (_, l) { return "L" + l; });
    const peakLabel = cols[table.peak[1]];
    parts.push(GF.el("h3", { text: table.kind + " · " + t("layer") + " × " + t(table.columns) }));
    parts.push(GF.el("div", { class: "meta", id: "peak-" + table.kind, text: t("peak") + " " +
      GF.fmt(table.normalised[table.peak[0]][table.peak[1]], 2) + " · " + t("layer") + " " + table.peak[0] +
      " · " + t(table.columns) + " " + table.peak[1] + " " + JSON.stringify(peakLabel) }));
    const canvas = GF.heatmap(table.normalised, {
      colour: function (v) { return GF.diverging(v, 1); }, rowLabels: rows, colLabels: cols,
      describe: function (i, j, v) {
        return t("layer") + " " + i + " · " + t(table.columns) + " " + j + " " + JSON.stringify(cols[j]) +
          "\n" + GF.fmt(v, 3) + "   (" + t("raw") + " " + GF.fmt(table.values[i][j], 3) + ")";
      } });
    canvas.id = "patch-" + table.kind;
    parts.push(canvas);
  });
  return GF.el("section", { id: "patching" }, parts);
}

function bars(terms) {
  const scale = Math.max.apply(null, terms.map(function (x) { return Math.abs(x.value); }).concat([1e-9]));
  return GF.el("div", { id: "attr-bars" }, terms.map(function (term) {
    const width = Math.round(160 * Math.abs(term.value) / scale);
    const bar = GF.el("span", { style: "display:inline-block;height:12px;width:" + width + "px;background:" +
      (term.value >= 0 ? "#2f5fb3" : "#d9534f") + ";margin-" + (term.value >= 0 ? "left:160px" : "left:" + (160 - width) + "px") });
    return GF.el("div", { class: "attr-bar", "data-label": term.label, style: "display:flex;align-items:center;gap:8px;font-size:12px" }, [
      GF.el("span", { style: "width:110px;text-align:right;font-family:ui-monospace,Menlo,monospace", text: term.label }),
      GF.el("span", { style: "width:330px" }, [bar]),
      GF.el("span", { style: "font-family:ui-monospace,Menlo,monospace", text: (term.value >= 0 ? "+" : "") + term.value.toFixed(4) })]);
  }));
}

function attributionSection() {
  const A = D.attribution;
  const top = A.terms.slice().sort(function (a, b) { return Math.abs(b.value) - Math.abs(a.value); }).slice(0, 20);
  const parts = [GF.el("h2", { text: t("attribution") }), GF.el("p", { class: "note", text: t("attrNote") }),
    GF.el("div", { class: "meta", id: "attr-total", text: JSON.stringify(A.prompt) + " → " + JSON.stringify(A.target) +
      (A.other !== null ? " − " + JSON.stringify(A.other) : "") + " · " + t("logit") + " " + A.logit.toFixed(4) +
      " · " + t("sum") + " " + A.total.toFixed(4) }),
    GF.el("h3", { text: t("topTerms") }), bars(top)];
  if (A.grid.length) {
    const heads = A.grid[0].length - 1;
    const scale = Math.max.apply(null, A.grid.flat().map(Math.abs).concat([1e-9]));
    const cols = A.grid[0].map(function (_, h) { return h < heads ? "H" + h : "MLP"; });
    const canvas = GF.heatmap(A.grid, { colour: function (v) { return GF.diverging(v, scale); },
      rowLabels: A.grid.map(function (_, l) { return "L" + l; }), colLabels: cols,
      describe: function (i, j, v) { return "L" + i + " " + cols[j] + "   " + (v >= 0 ? "+" : "") + v.toFixed(4); } });
    canvas.id = "attr-grid";
    parts.push(GF.el("h3", { text: t("grid") }), canvas);
  }
  return GF.el("section", { id: "attribution" }, parts);
}

function headsSection() {
  const H = D.heads;
  const parts = [GF.el("h2", { text: t("heads") }), GF.el("p", { class: "note", text: t("headsNote") }),
    GF.el("div", { class: "meta", text: t("tokensPerCopy") + " " + H.seq_len + " · " + t("rows") + " " + H.batch +
      " · " + t("seed") + " " + H.seed })];
  const grids = [];
  Object.keys(H.kinds).forEach(function (kind) {
    const k = H.kinds[kind];
    const cols = k.scores[0].map(function (_, h) { return String(h); });   /* head numbers */
    const canvas = GF.heatmap(k.scores, { colour: function (v) { return GF.blue(v); },
      rowLabels: k.scores.map(function (_, l) { return "L" + l; }), colLabels: cols,
      describe: function (i, j, v) { return t(kind) + "  L" + i + "H" + j + "   " + v.toFixed(3); } });
    canvas.id = "heads-" + kind;
    const named = k.above.map(function (x) { return "L" + x[0] + "H" + x[1] + " (" + x[2].toFixed(2) + ")"; }).join(", ") || t("none");
    grids.push(GF.el("div", { class: "head-grid" }, [GF.el("h3", { text: t(kind) }), canvas,
      GF.el("div", { class: "meta", id: "above-" + kind, text: t("above") + " " + H.threshold + ": " + named })]));
  });
  parts.push(GF.el("div", { class: "side" }, grids));
  return GF.el("section", { id: "heads" }, parts);
}

function tokenList(id, items) {
  return GF.el("div", { id: id, class: "tokens" }, items.map(function (x) {
    return GF.el("span", { class: "tok", text: x.text + " " + (x.value >= 0 ? "+" : "") + x.value.toFixed(2) });
  }));
}

function featureBody(f) {
  const rows = f.contexts.map(function (c, n) {
    const chips = c.tokens.map(function (text, i) {
      const chip = GF.el("span", { class: "tok", text: text });
      chip.style.background = GF.rgb(orange(c.acts[i] / f.max));
      if (i === c.at) chip.style.outline = "2px solid #c0392b";
      const tip = t("feature") + " " + f.index + ": " + c.acts[i].toFixed(3);
      chip.addEventListener("mousemove", function (event) { GF.showTip(event, tip); });
      chip.addEventListener("mouseleave", GF.hideTip);
      return chip;
    });
    return GF.el("div", { class: "context", id: "context-" + n, style: "display:flex;gap:6px;margin:3px 0" }, [
      GF.el("span", { style: "width:56px;text-align:right;color:#6b7280", text: c.value.toFixed(2) }),
      GF.el("div", { class: "tokens" }, chips)]);
  });
  return GF.el("div", { id: "feature-body", "data-feature": String(f.index) }, [
    GF.el("div", { class: "meta", text: t("feature") + " " + f.index + " · " + t("maxAct") + " " + f.max.toFixed(3) +
      " · " + t("density") + " " + (100 * f.density).toFixed(2) + "%" }),
    GF.el("h3", { text: t("contexts") })].concat(rows).concat([
    GF.el("div", { class: "side" }, [
      GF.el("div", {}, [GF.el("h3", { text: t("raises") }), tokenList("raises", f.raises)]),
      GF.el("div", {}, [GF.el("h3", { text: t("lowers") }), tokenList("lowers", f.lowers)])])]));
}

function saeSection() {
  const S = D.sae;
  const buttons = S.features.map(function (f, i) {
    return GF.el("button", { id: "feature-" + f.index, class: i === shownFeature ? "on" : "", text: "#" + f.index,
      onclick: function () { shownFeature = i; render(); } });
  });
  const parts = [GF.el("h2", { text: t("sae") }), GF.el("p", { class: "note", text: t("saeNote") }),
    GF.el("div", { class: "meta", id: "sae-meta", text: (S.name ? S.name + " · " : "") + S.hook + " · " + S.arch +
      " · d_sae " + S.d_sae + " · " + S.positions + " " + t("positions") + " · " + t("l0") + " " + S.l0 }),
    GF.el("div", { class: "bar" }, buttons)];
  if (shownFeature !== null) parts.push(featureBody(S.features[shownFeature]));
  return GF.el("section", { id: "sae" }, parts);
}

function render() {
  document.documentElement.lang = GF.lang === "zh" ? "zh-CN" : "en";
  const header = GF.el("header", {}, [GF.el("h1", { text: "glassformer · " + t("title") + " · " + D.model }),
    GF.el("div", { class: "bar" }, [GF.langBar(setLang)])]);
  const sections = [];
  if (D.patching) sections.push(patchingSection());
  if (D.attribution) sections.push(attributionSection());
  if (D.heads) sections.push(headsSection());
  if (D.sae) sections.push(saeSection());
  document.getElementById("app").replaceChildren(header, GF.el("main", {}, sections));
}
const setLang = GF.languageSetter(render);

function find(list, key, value, what) {
  const hit = list.filter(function (x) { return x[key] === value; })[0];
  if (!hit) throw new Error(what + " " + value + " is not on this page");
  return hit;
}

window.glassformerViewer = {
  kind: "interp",
  sections: function () { return ["patching", "attribution", "heads", "sae"].filter(function (s) { return D[s]; }); },
  patching: function (kind) { return find(D.patching.tables, "kind", kind, "patching table").normalised; },
  patchPeak: function (kind) { return find(D.patching.tables, "kind", kind, "patching table").peak; },
  attribution: function () { return D.attribution.terms; },
  attributionGrid: function () { return D.attribution.grid; },
  headScores: function (kind) { return D.heads.kinds[kind].scores; },
  headsAbove: function (kind) { return D.heads.kinds[kind].above; },
  features: function () { return D.sae.features.map(function (f) { return f.index; }); },
  feature: function (index) { return find(D.sae.features, "index", index, "feature"); },
  showFeature: function (index) { shownFeature = D.sae.features.indexOf(find(D.sae.features, "index", index, "feature")); render(); },
  setLang: setLang,
  lang: function () { return GF.lang; },
};
render();
})();
