/* glassformer model page: tokens, head view, model view, heatmap, GQA, logit lens, residual
   norms, one head step by step. Reads GF.data (page_data.py); exposes window.glassformerViewer. */
"use strict";
(function () {
const D = GF.data;
const TEXT = {
  en: {
    tokens: "Tokens", layout: "Layout", horizontal: "horizontal", vertical: "vertical",
    groupsNote: "Boxes are characters; a box with several tokens holds one character cut into bytes. Click a token to see its bytes.",
    layer: "Layer", head: "Head", heads: "Heads",
    headView: "Head view", headNote: "Lines from each query token (left) to the keys it attends to (right); darker = more weight. One colour per head.",
    modelView: "Model view", modelNote: "One small heatmap per layer (row) and head (column). Click one to enlarge it below.",
    heatmap: "Attention weights", heatmapNote: "Row = query token, column = key token. Hover for the value. Grey = padding.",
    gqa: "Grouped-query attention", lens: "Logit lens",
    lensNote: "Final norm and unembedding applied to the residual stream after each layer: top guess and its probability. Hover for the top-k, the rank of the final prediction and the entropy. Green outline: the model's final prediction.",
    noLens: "An encoder has no LM head, so there is no logit lens.",
    mlmNoLens: "A masked-LM BERT predicts the token at each position, not the next one: no logit lens; its guesses are in the masked-LM section below.",
    mlm: "Masked-LM predictions", mlmNote: "The masked-LM head's top guesses at every position (rows: 1st, 2nd, ...), from the same forward as the attention above. [MASK] positions are outlined: the model reads both sides of them to fill them in.",
    guess: "guess",
    norms: "Residual stream norm", normsNote: "||x|| of the residual stream at each position (column) before layer 0 (row 0) and after each layer.",
    steps: "One head, step by step", query: "query", key: "key", weight: "weight",
    bidir: "bidirectional (encoder): every token sees every other token",
    causal: "causal (decoder): a token sees itself and the tokens before it",
    bidirLegend: "Bidirectional (encoder): every token reads every other token, before and after it: the whole matrix is filled.",
    causalLegend: "Causal (decoder): a token reads only itself and the tokens before it: the lower triangle.",
    lookAhead: function (share) { return "This head puts " + share + " of its weight on tokens after the query (averaged over the queries; a decoder's is always 0%)."; },
    token: "token", id: "id", bytes: "bytes", group: "character", rank: "rank of final", entropy: "entropy (bits)",
    gqaText: function (h, k, g) { return h + " query heads share " + k + " key/value heads: query head h reads KV head floor(h / " + g + ")."; },
    mha: "Every query head has its own key/value head (no grouping).",
    queryHead: "query head", kvHead: "reads KV head",
  },
  zh: {
    tokens: "词元", layout: "排列", horizontal: "横排", vertical: "竖排",
    groupsNote: "每个方框是一个字；框里有多个词元，说明这个字的字节被切成了几段。点击词元查看它的字节。",
    layer: "层", head: "头", heads: "注意力头",
    headView: "注意力头视图", headNote: "从每个查询词元（左）连向它关注的键词元（右），颜色越深权重越大。每个头一种颜色。",
    modelView: "模型总览", modelNote: "每层（行）每个头（列）一张小热力图。点击放大到下方。",
    heatmap: "注意力权重", heatmapNote: "行是查询词元，列是键词元。鼠标悬停查看数值。灰色是填充。",
    gqa: "分组查询注意力（GQA）", lens: "Logit 透镜",
    lensNote: "对每一层之后的残差流做最终归一化和反嵌入：最可能的下一个词元及其概率。悬停查看前 k 个、最终预测的排名和熵。绿框：模型最终的预测。",
    noLens: "编码器没有语言模型头，所以没有 logit 透镜。",
    mlmNoLens: "掩码语言模型 BERT 预测的是每个位置本身的词元，而不是下一个词元：没有 logit 透镜；它的预测见下面的掩码语言模型一节。",
    mlm: "掩码语言模型的预测", mlmNote: "掩码语言模型头在每个位置最可能的几个词元（第 1、2……行），和上面的注意力来自同一次前向计算。[MASK] 的位置有框：模型读取它前后两边的字来填空。",
    guess: "候选",
    norms: "残差流范数", normsNote: "残差流在每个位置（列）的范数 ||x||：第 0 行在第 0 层之前，其余在每层之后。",
    steps: "一个头的计算步骤", query: "查询", key: "键", weight: "权重",
    bidir: "双向（编码器）：每个词元都能看到所有词元",
    causal: "因果（解码器）：词元只能看到自己和之前的词元",
    bidirLegend: "双向（编码器）：每个词元都读取所有其他词元，前面的和后面的都读：整个矩阵都有值。",
    causalLegend: "因果（解码器）：词元只读取自己和它之前的词元：只有下三角。",
    lookAhead: function (share) { return "这个头把 " + share + " 的权重放在查询词元之后的词元上（对所有查询取平均；解码器永远是 0%）。"; },
    token: "词元", id: "编号", bytes: "字节", group: "字", rank: "最终预测的排名", entropy: "熵（比特）",
    gqaText: function (h, k, g) { return h + " 个查询头共享 " + k + " 个键/值头：查询头 h 读取键值头 floor(h / " + g + ")。"; },
    mha: "每个查询头都有自己的键/值头（没有分组）。",
    queryHead: "查询头", kvHead: "读取键值头",
  },
};
const state = { layer: D.layers[0], head: D.heads[0], shown: new Set(D.heads), layout: "horizontal", token: null };
const decoded = new Map();            // layer -> Float32Array (heads x T x S), decoded on first use
const groupOf = [];                   // token position -> [group index, part, parts]
D.groups.forEach(function (g, gi) { g.tokens.forEach(function (t, k) { groupOf[t] = [gi, k + 1, g.tokens.length]; }); });
const T = D.T, S = D.S;
function t(key) { return TEXT[GF.lang][key]; }

function layerWeights(layer) {
  if (!decoded.has(layer)) {
    const packed = D.attention[String(layer)];
    if (!packed) throw new Error("layer " + layer + " is not in this page (see --layers)");
    const levels = GF.bytes(packed.q);
    const maxBytes = GF.bytes(packed.max);
    const rowMax = new Float32Array(maxBytes.buffer, 0, maxBytes.length / 4);
    const nh = D.heads.length, out = new Float32Array(nh * T * S);
    const tri = D.causal && T === S;
    let at = 0;
    for (let h = 0; h < nh; h++) {
      for (let i = 0; i < T; i++) {
        const scale = rowMax[h * T + i] / 255;
        const width = tri ? i + 1 : S;
        for (let j = 0; j < width; j++) out[(h * T + i) * S + j] = levels[at++] * scale;
      }
    }
    decoded.set(layer, out);
  }
  return decoded.get(layer);
}
function attention(layer, head) {
  const index = D.heads.indexOf(head);
  if (index < 0) throw new Error("head " + head + " is not in this page (see --heads)");
  const w = layerWeights(layer), rows = [];
  for (let i = 0; i < T; i++) rows.push(Array.from(w.subarray((index * T + i) * S, (index * T + i + 1) * S)));
  return rows;
}
function visible(text) {             /* newlines and tabs drawn as signs, so every cell is one line */
  return text.replace(/\n/g, "↵").replace(/\t/g, "→");
}
function label(position) {
  const tok = D.tokens[position];
  if (tok.whole) return visible(tok.text);
  const g = groupOf[position];
  const text = visible(D.groups[g[0]].text.trim() || tok.text);
  return text + "(" + g[1] + "/" + g[2] + ")";
}
function lensAt(layer, position) {
  if (!D.lens || !D.lens.layers[layer]) return null;  // no lens, or a layer not chosen
  const row = D.lens.layers[layer];
  return row.ids[position].map(function (id, k) { return { id: id, text: D.vocab[String(id)], p: row.p[position][k] }; });
}
function headColour(head, alpha) {
  return "hsla(" + Math.round(360 * head / D.n_head) + ",70%,42%," + alpha + ")";
}
const padRows = D.tokens.map(function (tok) { return tok.pad; });

/* ---------------------------------------------------------------- sections */
function header() {
  const layerSelect = GF.el("select", { id: "layer" }, D.layers.map(function (l) {
    const option = GF.el("option", { value: l, text: t("layer") + " " + l });
    if (l === state.layer) option.selected = true;
    return option;
  }));
  layerSelect.addEventListener("change", function () { state.layer = Number(layerSelect.value); render(); });
  const headButtons = D.heads.map(function (h) {
    return GF.el("button", { id: "head-" + h, class: state.shown.has(h) ? "on" : "", text: t("head") + " " + h,
      style: "border-color:" + headColour(h, 1),
      onclick: function () { toggleHead(h); } });
  });
  const layoutButton = GF.el("button", { id: "layout", text: t("layout") + ": " + t(state.layout),
    onclick: function () { state.layout = state.layout === "horizontal" ? "vertical" : "horizontal"; render(); } });
  return GF.el("header", {}, [
    GF.el("h1", { text: "glassformer · " + D.model }),
    GF.el("div", { class: "meta", text: D.arch + " · " + D.n_layer + " " + t("layer") + " · " + D.n_head +
      " " + t("heads") + " · " + T + " " + t("tokens") + " · " + (D.causal ? t("causal") : t("bidir")) }),
    GF.el("div", { class: "bar" }, [GF.langBar(setLang), layoutButton, layerSelect].concat(headButtons)),
  ]);
}
function toggleHead(h) {
  state.head = h;
  if (state.shown.has(h) && state.shown.size > 1) state.shown.delete(h); else state.shown.add(h);
  render();
}
function tokensSection() {
  const box = GF.el("div", { class: "tokens " + state.layout, id: "token-strip" });
  D.groups.forEach(function (g) {
    box.appendChild(GF.el("span", { class: "group", title: JSON.stringify(g.text) }, g.tokens.map(function (p) {
      const tok = D.tokens[p];
      const cls = "tok" + (tok.whole ? "" : " part") + (tok.pad ? " pad" : "") + (state.token === p ? " sel" : "");
      return GF.el("span", { class: cls, "data-pos": p, text: tok.whole ? tok.text : label(p),
        onclick: function () { state.token = p; render(); } });
    })));
  });
  const detail = GF.el("div", { class: "detail", id: "token-detail" });
  if (state.token !== null) {
    const tok = D.tokens[state.token], g = D.groups[groupOf[state.token][0]];
    detail.textContent = t("token") + " " + state.token + " · " + t("id") + " " + tok.id + " · " + tok.text +
      (tok.hex ? " · " + t("bytes") + " " + tok.hex : "") + " · " + t("group") + " " + JSON.stringify(g.text);
  }
  return GF.el("section", { id: "tokens" }, [GF.el("h2", { text: t("tokens") }), GF.el("p", { class: "note", text: t("groupsNote") }), box, detail]);
}
function headView() {
  const vertical = state.layout === "vertical";
  const step = vertical ? 18 : 26, margin = 150, span = vertical ? 220 : 160;
  const width = vertical ? margin * 2 + span : Math.max(400, T * step + 40);
  const height = vertical ? T * step + 20 : span + 80;
  const canvas = GF.el("canvas", { id: "head-canvas", width: width, height: height });
  const ctx = canvas.getContext("2d");
  ctx.font = "13px system-ui, " + getComputedStyle(document.body).getPropertyValue("--cjk");
  const weights = layerWeights(state.layer);
  function anchor(side, i) {        // side 0 = queries, 1 = keys
    if (vertical) return [side === 0 ? margin : margin + span, 14 + i * step];
    return [20 + i * step + step / 2, side === 0 ? 40 : 40 + span];
  }
  state.shown.forEach(function (h) {
    const index = D.heads.indexOf(h);
    for (let i = 0; i < T; i++) {
      if ((state.token !== null && state.token !== i) || padRows[i]) continue;  /* padding reads nothing anyone uses */
      for (let j = 0; j < S; j++) {
        const w = weights[(index * T + i) * S + j];
        if (w < 0.02) continue;
        const a = anchor(0, i), b = anchor(1, j);
        ctx.strokeStyle = headColour(h, Math.min(1, w) * 0.9);
        ctx.lineWidth = 1 + 2 * w;
        ctx.beginPath(); ctx.moveTo(a[0], a[1]); ctx.lineTo(b[0], b[1]); ctx.stroke();
      }
    }
  });
  ctx.fillStyle = "#1d2330";
  for (let i = 0; i < T; i++) {
    const text = label(i);
    for (let side = 0; side < 2; side++) {
      const p = anchor(side, i);
      ctx.fillStyle = D.tokens[i].pad ? "#999" : "#1d2330";
      if (vertical) {
        ctx.textAlign = side === 0 ? "right" : "left"; ctx.textBaseline = "middle";
        ctx.fillText(text, p[0] + (side === 0 ? -6 : 6), p[1]);
      } else {
        ctx.save(); ctx.translate(p[0], p[1] + (side === 0 ? -6 : 6));
        ctx.rotate(-Math.PI / 4); ctx.textAlign = side === 0 ? "left" : "right"; ctx.textBaseline = "middle";
        ctx.fillText(text, 0, 0); ctx.restore();
      }
    }
  }
  return GF.el("section", { id: "head-view" }, [GF.el("h2", { text: t("headView") + " · " + t("layer") + " " + state.layer }),
    GF.el("p", { class: "note", text: t("headNote") }), canvas]);
}
function drawSmall(canvas) {          /* one layer x head thumbnail, drawn when it scrolls into view */
  const layer = Number(canvas.dataset.layer), head = Number(canvas.dataset.head);
  GF.thumbnail(canvas, layerWeights(layer), D.heads.indexOf(head), T, S,
    function (i, j) { return padRows[i] || padRows[j]; });
}
let thumbnails = null;                /* the IntersectionObserver of the current model view */
function small(layer, head, px) {
  const canvas = GF.el("canvas", { width: px, height: px, "data-layer": layer, "data-head": head,
    title: t("layer") + " " + layer + " · " + t("head") + " " + head });
  canvas.addEventListener("click", function () { state.layer = layer; state.head = head; render(); document.getElementById("heatmap").scrollIntoView(); });
  thumbnails.observe(canvas);
  return canvas;
}
function modelView() {
  /* note: a layer is decoded only when a view first needs it; the thumbnails ask when they
     scroll into view, so a long page does not decode all its layers at load */
  if (thumbnails) thumbnails.disconnect();
  thumbnails = new IntersectionObserver(function (entries) {
    entries.forEach(function (entry) {
      if (entry.isIntersecting) { drawSmall(entry.target); thumbnails.unobserve(entry.target); }
    });
  });
  const px = Math.max(36, Math.min(80, Math.floor(900 / D.heads.length)));
  const grid = GF.el("div", { class: "grid", id: "model-grid", style: "grid-template-columns: 48px repeat(" + D.heads.length + ", " + px + "px)" });
  grid.appendChild(GF.el("span"));
  D.heads.forEach(function (h) { grid.appendChild(GF.el("span", { class: "label", text: t("head") + " " + h })); });
  D.layers.forEach(function (l) {
    grid.appendChild(GF.el("span", { class: "label", text: t("layer") + " " + l }));
    D.heads.forEach(function (h) { grid.appendChild(small(l, h, px)); });
  });
  return GF.el("section", { id: "model-view" }, [GF.el("h2", { text: t("modelView") }), GF.el("p", { class: "note", text: t("modelNote") }), grid]);
}
/* the share of a head's weight on keys after the query, averaged over the real query rows:
   0 for a causal decoder, well above 0 for a bidirectional encoder */
function lookAhead(layer, head) {
  const matrix = attention(layer, head);
  let sum = 0, rows = 0;
  for (let i = 0; i < T; i++) {
    if (padRows[i]) continue;
    for (let j = i + 1; j < S; j++) sum += matrix[i][j];
    rows++;
  }
  return rows ? sum / rows : 0;
}
function heatmapSection() {
  const matrix = attention(state.layer, state.head);
  const canvas = GF.heatmap(matrix, { colour: function (v) { return GF.blue(Math.sqrt(v)); },
    greyRows: padRows, greyCols: padRows, rowLabels: D.tokens.map(function (tok, i) { return label(i); }),
    colLabels: D.tokens.map(function (tok, i) { return label(i); }),
    describe: function (i, j, v) { return t("query") + " " + i + " " + JSON.stringify(label(i)) + " → " + t("key") + " " + j + " " + JSON.stringify(label(j)) + "\n" + t("weight") + " " + GF.fmt(v); } });
  canvas.id = "heatmap-canvas";
  const legend = GF.maskLegend("attention-kind", D.causal ? "causal" : "bidirectional", D.causal ? t("causalLegend") : t("bidirLegend"));
  return GF.el("section", { id: "heatmap" }, [GF.el("h2", { text: t("heatmap") + " · " + t("layer") + " " + state.layer + " · " + t("head") + " " + state.head }),
    legend, GF.el("p", { class: "note", id: "look-ahead", text: TEXT[GF.lang].lookAhead(GF.fmt(100 * lookAhead(state.layer, state.head), 1) + "%") }),
    GF.el("p", { class: "note", text: t("heatmapNote") }), canvas]);
}
function gqaSection() {
  const groups = D.n_head / D.n_kv_head;
  const rows = [];
  for (let h = 0; h < D.n_head; h++) {
    const kv = Math.floor(h / groups);
    rows.push(GF.el("tr", {}, [GF.el("td", { text: t("queryHead") + " " + h }),
      GF.el("td", { style: "background:" + headColour(kv * groups, 0.25), text: t("kvHead") + " " + kv })]));
  }
  const text = groups > 1 ? TEXT[GF.lang].gqaText(D.n_head, D.n_kv_head, groups) : t("mha");
  return GF.el("section", { id: "gqa" }, [GF.el("h2", { text: t("gqa") }), GF.el("p", { class: "note", text: text }),
    GF.el("table", { class: "gqa" }, rows)]);
}
function lensSection() {
  const section = GF.el("section", { id: "lens" }, [GF.el("h2", { text: t("lens") })]);
  if (!D.lens) { section.appendChild(GF.el("p", { class: "note", text: t(D.mlm ? "mlmNoLens" : "noLens") })); return section; }
  section.appendChild(GF.el("p", { class: "note", text: t("lensNote") }));
  const head = GF.el("tr", {}, [GF.el("th", { text: t("layer") })].concat(D.tokens.map(function (tok, i) { return GF.el("th", { text: label(i) }); })));
  const body = [head];
  for (let l = D.lens.layers.length - 1; l >= 0; l--) {
    const row = D.lens.layers[l];
    if (!row) continue;  // a layer not chosen (--layers): its lens was not computed
    const cells = [GF.el("th", { text: String(l) })];
    for (let i = 0; i < T; i++) {
      const top = lensAt(l, i), p = top[0].p;
      const tip = top.map(function (g) { return JSON.stringify(g.text) + " " + GF.fmt(g.p, 3); }).join("\n") +
        "\n" + t("rank") + " " + row.rank[i] + " · " + t("entropy") + " " + row.entropy[i];
      const c = GF.blue(p);
      cells.push(GF.el("td", { class: row.rank[i] === 0 ? "final" : "", title: tip, "data-layer": l, "data-pos": i,
        style: "background:" + GF.rgb(c) + ";color:" + (p > 0.55 ? "#fff" : "#1d2330"),
        text: visible(top[0].text) + " " + Math.round(100 * p) + "%" }));
    }
    body.push(GF.el("tr", {}, cells));
  }
  section.appendChild(GF.el("table", { class: "lens", id: "lens-table" }, body));
  return section;
}
function mlmAt(position) {
  if (!D.mlm) return null;
  return D.mlm.ids[position].map(function (id, k) { return { id: id, text: D.vocab[String(id)], p: D.mlm.p[position][k] }; });
}
function mlmSection() {
  const head = GF.el("tr", {}, [GF.el("th", { text: t("guess") })].concat(D.tokens.map(function (tok, i) {
    return GF.el("th", { class: D.mlm.masked.indexOf(i) >= 0 ? "final" : "", text: label(i) }); })));
  const body = [head];
  for (let r = 0; r < D.mlm.k; r++) {
    const cells = [GF.el("th", { text: String(r + 1) })];
    for (let i = 0; i < T; i++) {
      const g = mlmAt(i)[r], c = GF.blue(g.p);
      cells.push(GF.el("td", { class: D.mlm.masked.indexOf(i) >= 0 ? "final" : "", "data-pos": i, "data-rank": r,
        style: "background:" + GF.rgb(c) + ";color:" + (g.p > 0.55 ? "#fff" : "#1d2330"),
        title: JSON.stringify(g.text) + " " + GF.fmt(g.p, 3), text: visible(g.text) + " " + Math.round(100 * g.p) + "%" }));
    }
    body.push(GF.el("tr", {}, cells));
  }
  return GF.el("section", { id: "mlm" }, [GF.el("h2", { text: t("mlm") }), GF.el("p", { class: "note", text: t("mlmNote") }),
    GF.el("table", { class: "lens", id: "mlm-table" }, body)]);
}
function normsSection() {
  const max = Math.max.apply(null, D.norms.map(function (r) { return Math.max.apply(null, r); }));
  const canvas = GF.heatmap(D.norms, { colour: function (v) { return GF.blue(v / max); }, greyCols: padRows,
    describe: function (i, j, v) { return t("layer") + " " + (i === 0 ? "0 (in)" : i - 1 + " (out)") + " · " + t("token") + " " + j + " " + JSON.stringify(label(j)) + "\n||x|| = " + GF.fmt(v, 2); } });
  canvas.id = "norms-canvas";
  return GF.el("section", { id: "norms" }, [GF.el("h2", { text: t("norms") }), GF.el("p", { class: "note", text: t("normsNote") }), canvas]);
}
function stepsSection() {
  const st = D.steps, labels = st.text[GF.lang];
  function block(key, textKey, matrix, colour) {
    const canvas = GF.heatmap(matrix, { colour: colour, cell: Math.max(3, Math.min(22, Math.floor(420 / Math.max(matrix.length, matrix[0].length)))),
      describe: function (i, j, v) { return key + "[" + i + "," + j + "] = " + GF.fmt(v); } });
    return GF.el("div", { class: "step", id: "step-" + key }, [GF.el("h3", { text: key }), GF.el("p", { class: "note", text: labels[textKey] }), canvas]);
  }
  const scale = Math.max.apply(null, st.scores.map(function (r) { return Math.max.apply(null, r.map(Math.abs)); })) || 1;
  const outScale = Math.max.apply(null, st.output.map(function (r) { return Math.max.apply(null, r.map(Math.abs)); })) || 1;
  return GF.el("section", { id: "steps" }, [
    GF.el("h2", { text: t("steps") + " · " + t("layer") + " " + st.layer + " · " + t("head") + " " + st.head + " (KV " + st.kv_head + ")" }),
    GF.el("div", { class: "steps" }, [
      block("scores", "scores", st.scores, function (v) { return GF.diverging(v, scale); }),
      block("masked_scores", "masked_scores", st.masked, function (v) { return GF.diverging(v, scale); }),
      block("weights", "weights", st.weights, function (v) { return GF.blue(Math.sqrt(v)); }),
      block("output", "output", st.output, function (v) { return GF.diverging(v, outScale); }),
    ])]);
}

function render() {
  document.documentElement.lang = GF.lang === "zh" ? "zh-CN" : "en";
  const app = document.getElementById("app");
  const sections = [tokensSection(), headView(), modelView(), heatmapSection(), gqaSection(), lensSection()];
  if (D.mlm) sections.push(mlmSection());
  if (GF.expertsSection) sections.push(GF.expertsSection(render));  /* experts.js: MoE models */
  app.replaceChildren(header(), GF.el("main", {}, sections.concat([normsSection(), stepsSection()])));
}
const setLang = GF.languageSetter(render);

window.glassformerViewer = {
  kind: "model",
  tokens: function () { return D.tokens.map(function (tok) { return { id: tok.id, text: tok.text }; }); },
  groups: function () { return D.groups.map(function (g) { return { text: g.text, tokens: g.tokens.slice() }; }); },
  layers: function () { return D.layers.slice(); },
  heads: function () { return D.heads.slice(); },
  attention: attention,
  logitLens: lensAt,
  maskedLM: mlmAt,
  lookAhead: lookAhead,
  experts: function (layer) {
    if (!GF.experts) throw new Error("this model has no experts: its MLPs are dense");
    return GF.experts(layer);
  },
  decodedLayers: function () { return Array.from(decoded.keys()).sort(function (a, b) { return a - b; }); },
  setLang: setLang,
  lang: function () { return GF.lang; },
};
render();
})();
