/* glassformer encoder-decoder page: the three kinds of attention of one source and its output.
   cross-attention (rows = output tokens, columns = source tokens), the encoder's bidirectional
   self-attention, the decoder's causal self-attention. Reads GF.data (seq2seq_page.py);
   exposes window.glassformerViewer (docs/viewer.md). */
"use strict";
(function () {
const D = GF.data;
const TEXT = {
  en: {
    layer: "Layer", layers: "layers", head: "Head", heads: "heads", encoder: "encoder", decoder: "decoder",
    encLayer: "Encoder layer", decLayer: "Decoder layer",
    tokens: "Source and output", source: "Source", output: "Output",
    given: "The output is the target given (teacher forcing: each decoder position reads the tokens before it and writes the next one).",
    translated: "The output is the model's own greedy translation of the source.",
    cross: "Cross-attention: which source tokens each output token reads",
    crossLegend: "Cross (decoder → encoder): every output token may read every source token; only source padding is masked.",
    crossNote: "Row = output token (what that decoder position writes), column = source token. Darker = more weight. Hover for the value.",
    crossGrid: "Cross-attention, every layer and head", gridNote: "One small map per decoder layer (row) and head (column). Click one to show it above.",
    reads: "Most-read source token", readsNote: "For each output token, the source token with the largest weight, averaged over the heads of this layer. In a trained translation model this is close to a word alignment.",
    encoderAttn: "Encoder self-attention", encoderNote: "Row = source token (query), column = source token (key). Grey = padding.",
    bidirLegend: "Bidirectional (encoder): every source token reads every other, before and after it: the whole matrix is filled.",
    decoderAttn: "Decoder self-attention", decoderNote: "Row = output token, column = decoder input token (key). Nothing above the diagonal.",
    causalLegend: "Causal (decoder): an output position reads only itself and the positions before it: the lower triangle.",
    query: "output", key: "source", weight: "weight", reads2: "reads",
    lookAhead: function (share) { return "This head puts " + share + " of its weight on positions after the query (averaged over the queries)."; },
  },
  zh: {
    layer: "层", layers: "层", head: "头", heads: "个头", encoder: "编码器", decoder: "解码器",
    encLayer: "编码器层", decLayer: "解码器层",
    tokens: "源序列与输出", source: "源", output: "输出",
    given: "输出是给定的目标序列（教师强制：解码器的每个位置读取它之前的词元，写出下一个词元）。",
    translated: "输出是模型自己对源序列的贪心翻译。",
    cross: "交叉注意力：每个输出词元读取哪些源词元",
    crossLegend: "交叉（解码器 → 编码器）：每个输出词元都可以读取所有源词元；只有源序列的填充被遮住。",
    crossNote: "行是输出词元（解码器这个位置写出的词元），列是源词元。颜色越深权重越大。鼠标悬停查看数值。",
    crossGrid: "交叉注意力：所有层和头", gridNote: "每个解码器层（行）每个头（列）一张小图。点击在上方显示。",
    reads: "读得最多的源词元", readsNote: "对每个输出词元，这一层各个头平均后权重最大的源词元。训练好的翻译模型里，这接近词对齐。",
    encoderAttn: "编码器自注意力", encoderNote: "行是源词元（查询），列是源词元（键）。灰色是填充。",
    bidirLegend: "双向（编码器）：每个源词元都读取所有其他源词元，前面的和后面的都读：整个矩阵都有值。",
    decoderAttn: "解码器自注意力", decoderNote: "行是输出词元，列是解码器输入词元（键）。对角线以上没有值。",
    causalLegend: "因果（解码器）：输出位置只读取自己和它之前的位置：只有下三角。",
    query: "输出", key: "源", weight: "权重", reads2: "读取",
    lookAhead: function (share) { return "这个头把 " + share + " 的权重放在查询之后的位置上（对所有查询取平均）。"; },
  },
};
function t(key) { return TEXT[GF.lang][key]; }
const S = D.S, T = D.T, NH = D.heads.length;
const state = { enc: D.enc_layers[0], dec: D.dec_layers[0], head: D.heads[0] };
const decoded = { encoder: new Map(), decoder: new Map(), cross: new Map() };
const SHAPE = { encoder: [S, S, false], decoder: [T, T, true], cross: [T, S, false] };
const srcPad = D.source_tokens.map(function (tok) { return tok.pad; });

/* one layer of one kind: Float32Array (heads x rows x cols), decoded on first use (pack.py) */
function layerWeights(which, layer) {
  const cache = decoded[which];
  if (!cache.has(layer)) {
    const packed = D[which][String(layer)];
    if (!packed) throw new Error(which + " layer " + layer + " is not in this page (see --layers)");
    const rows = SHAPE[which][0], cols = SHAPE[which][1], tri = SHAPE[which][2];
    const levels = GF.bytes(packed.q), maxBytes = GF.bytes(packed.max);
    const rowMax = new Float32Array(maxBytes.buffer, 0, maxBytes.length / 4);
    const out = new Float32Array(NH * rows * cols);
    let at = 0;
    for (let h = 0; h < NH; h++) {
      for (let i = 0; i < rows; i++) {
        const scale = rowMax[h * rows + i] / 255, width = tri ? i + 1 : cols;
        for (let j = 0; j < width; j++) out[(h * rows + i) * cols + j] = levels[at++] * scale;
      }
    }
    cache.set(layer, out);
  }
  return cache.get(layer);
}
function attention(layer, head, which) {
  which = which || "cross";
  if (!SHAPE[which]) throw new Error("attention(layer, head, which): which is 'cross', 'encoder' or 'decoder', got " + which);
  const index = D.heads.indexOf(head);
  if (index < 0) throw new Error("head " + head + " is not in this page (see --heads)");
  const rows = SHAPE[which][0], cols = SHAPE[which][1], w = layerWeights(which, layer), out = [];
  for (let i = 0; i < rows; i++) out.push(Array.from(w.subarray((index * rows + i) * cols, (index * rows + i + 1) * cols)));
  return out;
}
/* for each output token, the source position with the largest head-averaged weight */
function mostRead(layer) {
  const w = layerWeights("cross", layer), best = [];
  for (let i = 0; i < T; i++) {
    let top = 0, topValue = -1;
    for (let j = 0; j < S; j++) {
      let sum = 0;
      for (let h = 0; h < NH; h++) sum += w[(h * T + i) * S + j];
      if (sum > topValue) { top = j; topValue = sum; }
    }
    best.push(top);
  }
  return best;
}
/* self-attention only: the share of a head's weight on keys after the query, averaged over the
   real queries (0 for the causal decoder) */
function lookAhead(layer, head, which) {
  if (which !== "encoder" && which !== "decoder") throw new Error("lookAhead(layer, head, which): which is 'encoder' or 'decoder'");
  const matrix = attention(layer, head, which), n = matrix.length;
  let sum = 0, rows = 0;
  for (let i = 0; i < n; i++) {
    if (which === "encoder" && srcPad[i]) continue;
    for (let j = i + 1; j < n; j++) sum += matrix[i][j];
    rows++;
  }
  return rows ? sum / rows : 0;
}
function shareNote(id, layer, which) {
  return GF.el("p", { class: "note", id: id, text: TEXT[GF.lang].lookAhead(GF.fmt(100 * lookAhead(layer, state.head, which), 1) + "%") });
}
function visible(text) { return text.replace(/\n/g, "↵").replace(/\t/g, "→"); }
function srcLabel(j) { return visible(D.source_tokens[j].text); }
function outLabel(i) { return visible(D.output_tokens[i].text); }
function decLabel(j) { return visible(D.decoder_tokens[j].text); }

/* ---------------------------------------------------------------- sections */
function select(id, label, values, current, onChange) {
  const node = GF.el("select", { id: id }, values.map(function (l) {
    const option = GF.el("option", { value: l, text: label + " " + l });
    if (l === current) option.selected = true;
    return option;
  }));
  node.addEventListener("change", function () { onChange(Number(node.value)); render(); });
  return node;
}
function header() {
  const heads = D.heads.map(function (h) {
    return GF.el("button", { id: "head-" + h, class: h === state.head ? "on" : "", text: t("head") + " " + h,
      onclick: function () { state.head = h; render(); } });
  });
  return GF.el("header", {}, [
    GF.el("h1", { text: "glassformer · " + D.model }),
    GF.el("div", { class: "meta", text: D.arch + " · " + t("encoder") + " " + D.n_enc_layer + " " + t("layers") + " · " +
      t("decoder") + " " + D.n_dec_layer + " " + t("layers") + " · " + D.n_head + " " + t("heads") + " · S = " + S + " · T = " + T }),
    GF.el("div", { class: "bar" }, [GF.langBar(setLang),
      select("dec-layer", t("decLayer"), D.dec_layers, state.dec, function (l) { state.dec = l; }),
      select("enc-layer", t("encLayer"), D.enc_layers, state.enc, function (l) { state.enc = l; })].concat(heads)),
  ]);
}
function tokenRow(id, title, tokens, pads) {
  return GF.el("div", { class: "tokens", id: id }, [GF.el("span", { class: "label", text: title + ":" })].concat(
    tokens.map(function (tok, i) {
      return GF.el("span", { class: "tok" + (pads && pads[i] ? " pad" : ""), "data-pos": i, title: "id " + tok.id, text: visible(tok.text) });
    })));
}
function tokensSection() {
  return GF.el("section", { id: "tokens" }, [GF.el("h2", { text: t("tokens") }),
    tokenRow("source-strip", t("source"), D.source_tokens, srcPad),
    tokenRow("output-strip", t("output"), D.output_tokens, null),
    GF.el("p", { class: "note", id: "output-note", text: D.translated ? t("translated") : t("given") })]);
}
function heatmap(id, which, layer, rowLabel, colLabel, greyCols) {
  const matrix = attention(layer, state.head, which);
  const rows = SHAPE[which][0], cols = SHAPE[which][1];
  const canvas = GF.heatmap(matrix, { colour: function (v) { return GF.blue(Math.sqrt(v)); }, greyCols: greyCols,
    greyRows: which === "encoder" ? srcPad : null,
    rowLabels: Array.from({ length: rows }, function (_, i) { return rowLabel(i); }),
    colLabels: Array.from({ length: cols }, function (_, j) { return colLabel(j); }),
    describe: function (i, j, v) { return JSON.stringify(rowLabel(i)) + " → " + JSON.stringify(colLabel(j)) + "\n" + t("weight") + " " + GF.fmt(v); } });
  canvas.id = id;
  return canvas;
}
function crossSection() {
  const best = mostRead(state.dec);
  const reads = GF.el("table", { class: "gqa", id: "cross-reads" }, best.map(function (j, i) {
    return GF.el("tr", { "data-row": i, "data-source": j }, [GF.el("td", { text: outLabel(i) }), GF.el("td", { text: "← " + t("reads2") }),
      GF.el("td", { text: srcLabel(j) + " (" + j + ")" })]);
  }));
  return GF.el("section", { id: "cross-attention" }, [
    GF.el("h2", { text: t("cross") + " · " + t("decLayer") + " " + state.dec + " · " + t("head") + " " + state.head }),
    GF.maskLegend("cross-kind", "cross", t("crossLegend")),
    GF.el("p", { class: "note", text: t("crossNote") }),
    heatmap("cross-canvas", "cross", state.dec, outLabel, srcLabel, srcPad),
    GF.el("h3", { text: t("reads") }), GF.el("p", { class: "note", text: t("readsNote") }), reads]);
}
function crossGrid() {
  const px = Math.max(36, Math.min(80, Math.floor(900 / NH)));
  const grid = GF.el("div", { class: "grid", id: "cross-grid", style: "grid-template-columns: 48px repeat(" + NH + ", " + px + "px)" });
  grid.appendChild(GF.el("span"));
  D.heads.forEach(function (h) { grid.appendChild(GF.el("span", { class: "label", text: t("head") + " " + h })); });
  D.dec_layers.forEach(function (l) {
    grid.appendChild(GF.el("span", { class: "label", text: t("layer") + " " + l }));
    D.heads.forEach(function (h) {
      const canvas = GF.el("canvas", { width: px, height: px, "data-layer": l, "data-head": h });
      drawSmall(canvas, l, h);
      canvas.addEventListener("click", function () { state.dec = l; state.head = h; render(); });
      grid.appendChild(canvas);
    });
  });
  return GF.el("section", { id: "cross-grid-view" }, [GF.el("h2", { text: t("crossGrid") }), GF.el("p", { class: "note", text: t("gridNote") }), grid]);
}
function drawSmall(canvas, layer, head) {   /* one cross-attention thumbnail */
  GF.thumbnail(canvas, layerWeights("cross", layer), D.heads.indexOf(head), T, S,
    function (i, j) { return srcPad[j]; });
}
function encoderSection() {
  return GF.el("section", { id: "encoder-attention" }, [
    GF.el("h2", { text: t("encoderAttn") + " · " + t("encLayer") + " " + state.enc + " · " + t("head") + " " + state.head }),
    GF.maskLegend("encoder-kind", "bidirectional", t("bidirLegend")), shareNote("encoder-look-ahead", state.enc, "encoder"),
    GF.el("p", { class: "note", text: t("encoderNote") }),
    heatmap("encoder-canvas", "encoder", state.enc, srcLabel, srcLabel, srcPad)]);
}
function decoderSection() {
  return GF.el("section", { id: "decoder-attention" }, [
    GF.el("h2", { text: t("decoderAttn") + " · " + t("decLayer") + " " + state.dec + " · " + t("head") + " " + state.head }),
    GF.maskLegend("decoder-kind", "causal", t("causalLegend")), shareNote("decoder-look-ahead", state.dec, "decoder"),
    GF.el("p", { class: "note", text: t("decoderNote") }),
    heatmap("decoder-canvas", "decoder", state.dec, outLabel, decLabel, null)]);
}

function render() {
  document.documentElement.lang = GF.lang === "zh" ? "zh-CN" : "en";
  document.getElementById("app").replaceChildren(header(), GF.el("main", {}, [tokensSection(), crossSection(),
    crossGrid(), encoderSection(), decoderSection()]));
}
const setLang = GF.languageSetter(render);

window.glassformerViewer = {
  kind: "seq2seq",
  sourceTokens: function () { return D.source_tokens.map(function (tok) { return { id: tok.id, text: tok.text, pad: tok.pad }; }); },
  decoderTokens: function () { return D.decoder_tokens.map(function (tok) { return { id: tok.id, text: tok.text }; }); },
  outputTokens: function () { return D.output_tokens.map(function (tok) { return { id: tok.id, text: tok.text }; }); },
  layers: function () { return { encoder: D.enc_layers.slice(), decoder: D.dec_layers.slice() }; },
  heads: function () { return D.heads.slice(); },
  attention: attention,
  mostRead: mostRead,
  lookAhead: lookAhead,
  setLang: setLang,
  lang: function () { return GF.lang; },
};
render();
})();
