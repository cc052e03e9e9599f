/* glassformer viewer, shared by both pages: data, base64, colours, heatmaps, tooltips, language.
   Nothing here fetches anything: the data is the JSON element #gf-data of this very file. */
"use strict";
const GF = {};
GF.data = JSON.parse(document.getElementById("gf-data").textContent);
GF.lang = GF.data.lang === "zh" ? "zh" : "en";

/* base64 -> bytes (atob gives one char per byte) */
GF.bytes = function (b64) {
  const bin = atob(b64);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
};

GF.el = function (tag, attrs, children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (key === "text") node.textContent = value;
    else if (key === "onclick") node.addEventListener("click", value);
    else node.setAttribute(key, value);
  }
  for (const child of children || []) node.appendChild(child);
  return node;
};

/* white -> blue for weights in [0, 1]; diverging red/blue for signed values */
GF.blue = function (v) {
  const t = Math.max(0, Math.min(1, v));
  return [Math.round(255 - 208 * t), Math.round(255 - 160 * t), Math.round(255 - 76 * t)];
};
GF.diverging = function (v, scale) {
  const t = Math.max(-1, Math.min(1, v / (scale || 1)));
  if (t >= 0) return GF.blue(t);
  return [255, Math.round(255 + 150 * t), Math.round(255 + 170 * t)];
};
GF.rgb = function (c) { return "rgb(" + c[0] + "," + c[1] + "," + c[2] + ")"; };

/* One head's T x S weights as a thumbnail filling `canvas`: w holds heads x T x S floats (the
   decoded layer), index the head's place in it; grey(i, j) marks padding cells. One pixel per
   weight, drawn off screen and scaled up unsmoothed; sqrt lifts the small weights into view. */
GF.thumbnail = function (canvas, w, index, T, S, grey) {
  const off = GF.el("canvas", { width: S, height: T });
  const octx = off.getContext("2d"), image = octx.createImageData(S, T);
  for (let i = 0; i < T; i++) {
    for (let j = 0; j < S; j++) {
      const c = grey(i, j) ? [200, 200, 200] : GF.blue(Math.sqrt(w[(index * T + i) * S + j]));
      const at = 4 * (i * S + j);
      image.data[at] = c[0]; image.data[at + 1] = c[1]; image.data[at + 2] = c[2]; image.data[at + 3] = 255;
    }
  }
  octx.putImageData(image, 0, 0);
  const ctx = canvas.getContext("2d");
  ctx.imageSmoothingEnabled = false;
  ctx.drawImage(off, 0, 0, canvas.width, canvas.height);
};

GF.tooltip = function () {
  let tip = document.getElementById("tooltip");
  if (!tip) { tip = GF.el("div", { id: "tooltip" }); document.body.appendChild(tip); }
  return tip;
};
GF.showTip = function (event, text) {
  const tip = GF.tooltip();
  tip.textContent = text;
  tip.style.display = "block";
  tip.style.left = (event.clientX + 14) + "px";
  tip.style.top = (event.clientY + 10) + "px";
};
GF.hideTip = function () { GF.tooltip().style.display = "none"; };

/* A heatmap of matrix rows x cols (nested arrays; null = masked) on a canvas, cell px square.
   colour(v) -> [r, g, b]; greyRows/greyCols mark padding; describe(i, j, v) -> hover text;
   rowLabels/colLabels (optional) are written left of the rows and above the columns. */
GF.heatmap = function (matrix, opts) {
  const rows = matrix.length, cols = rows ? matrix[0].length : 0;
  const cell = opts.cell || Math.max(3, Math.min(28, Math.floor(560 / Math.max(rows, cols, 1))));
  /* column labels of one or two characters (a letter, a CJK character) stand upright in a
     short band; longer ones are turned a quarter and get a taller one */
  const upright = opts.colLabels && opts.colLabels.every(function (text) { return Array.from(text).length <= 2; });
  const left = opts.rowLabels ? 96 : 0, top = opts.colLabels ? (upright ? 20 : 72) : 0;
  const canvas = GF.el("canvas", { width: left + cols * cell, height: top + rows * cell });
  const ctx = canvas.getContext("2d");
  for (let i = 0; i < rows; i++) {
    for (let j = 0; j < cols; j++) {
      const v = matrix[i][j];
      const grey = (opts.greyRows && opts.greyRows[i]) || (opts.greyCols && opts.greyCols[j]);
      ctx.fillStyle = v === null ? "#eeeeee" : GF.rgb(opts.colour(v));
      if (grey) ctx.fillStyle = "#c8c8c8";
      ctx.fillRect(left + j * cell, top + i * cell, cell, cell);
    }
  }
  const size = Math.max(8, Math.min(13, cell - 1));
  ctx.font = size + "px system-ui, " + getComputedStyle(document.body).getPropertyValue("--cjk");
  ctx.fillStyle = "#1d2330";
  ctx.textBaseline = "middle";
  if (opts.rowLabels && size <= cell + 1) {
    ctx.textAlign = "right";
    opts.rowLabels.forEach(function (text, i) { ctx.fillText(text, left - 4, top + (i + 0.5) * cell, left - 6); });
  }
  if (upright && size <= cell + 1) {
    ctx.textAlign = "center";
    opts.colLabels.forEach(function (text, j) { ctx.fillText(text, left + (j + 0.5) * cell, top / 2, cell); });
  } else if (opts.colLabels && size <= cell + 1) {
    ctx.textAlign = "left";
    opts.colLabels.forEach(function (text, j) {
      ctx.save(); ctx.translate(left + (j + 0.5) * cell, top - 4); ctx.rotate(-Math.PI / 2);
      ctx.fillText(text, 0, 0, top - 6); ctx.restore();
    });
  }
  if (opts.describe) {
    canvas.addEventListener("mousemove", function (event) {
      const box = canvas.getBoundingClientRect();
      const i = Math.floor((event.clientY - box.top - top) / cell);
      const j = Math.floor((event.clientX - box.left - left) / cell);
      if (i >= 0 && i < rows && j >= 0 && j < cols) GF.showTip(event, opts.describe(i, j, matrix[i][j]));
      else GF.hideTip();
    });
    canvas.addEventListener("mouseleave", GF.hideTip);
  }
  return canvas;
};

GF.fmt = function (v, digits) { return v === null ? "-inf" : Number(v).toFixed(digits === undefined ? 4 : digits); };

/* A page's setLang: switch GF.lang to "en" or "zh" (anything else is an error), then render. */
GF.languageSetter = function (render) {
  return function (code) {
    if (code !== "en" && code !== "zh") throw new Error("setLang: 'en' or 'zh', got " + code);
    GF.lang = code;
    render();
  };
};

/* The language switch: two buttons; onChange re-renders the page. */
GF.langBar = function (onChange) {
  return GF.el("span", {}, ["en", "zh"].map(function (code) {
    return GF.el("button", { id: "lang-" + code, class: GF.lang === code ? "on" : "",
                             text: code === "en" ? "English" : "中文",
                             onclick: function () { onChange(code); } });
  }));
};

/* Which keys a query may read, as a small picture and one sentence: kind "bidirectional" (an
   encoder: the full square, every token reads every other), "causal" (a decoder: the lower
   triangle, a token reads itself and the tokens before it) or "cross" (an encoder-decoder's
   cross-attention: every output token may read every source token). The element carries
   data-kind for tests. */
GF.maskLegend = function (id, kind, text) {
  const rows = 5, cols = kind === "cross" ? 7 : 5, cell = 7;
  const icon = GF.el("canvas", { width: cols * cell + 1, height: rows * cell + 1, class: "mask-icon" });
  const ctx = icon.getContext("2d");
  for (let i = 0; i < rows; i++) {
    for (let j = 0; j < cols; j++) {
      const open = kind !== "causal" || j <= i;
      ctx.fillStyle = open ? "#2f5fb3" : "#eef0f4";
      ctx.fillRect(j * cell + 1, i * cell + 1, cell - 1, cell - 1);
    }
  }
  return GF.el("div", { class: "mask-legend", id: id, "data-kind": kind }, [icon, GF.el("span", { text: text })]);
};
