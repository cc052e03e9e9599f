"""The viewer on trained models: an encoder-decoder's cross-attention (which source letters each
output phone reads) and a masked-LM BERT's bidirectional attention on a poem line.

    python bench/viewer_trained_pages.py --seq2seq RUN [--words through knight ...]
                                         --bert RUN [--line "床前明月[MASK]，疑是地上霜。"]
                                         [--out DIR] [--screenshots DIR]

For each word: the model's own greedy output and, per output token, the source token its last
decoder layer reads most (cross-attention averaged over the heads), and one page per word. For
the line: per layer, the share of attention weight on tokens after the query (averaged over
heads and real queries; a causal decoder's is 0), the masked-LM top-3 at each [MASK], and its
page. --screenshots DIR: the cross-attention section of the first word's page and the BERT
page's heatmap and masked-LM sections as PNGs (playwright + Debian's chromium).

Prints a table, then one JSON object as its last line.
"""
from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np

from glassformer.io.pretrained import load_pretrained
from glassformer.viewer import inspect
from glassformer.viewer.show import show

WORDS = ["through", "knight", "phone", "question"]
LINE = "床前明月[MASK]，疑是地上霜。"
CHROMIUM = "/usr/bin/chromium"


def alignment(model, word: str) -> dict:
    """The greedy output of `word` and the most-read source token of each output token."""
    seen = inspect(model, word)
    cross = seen.cross_attentions[-1][0].mean(axis=0)                 # (H, T, S) -> (T, S)
    outputs = [tok.text for tok in seen.output_tokens]
    sources = [tok.text for tok in seen.source_tokens]
    reads = [sources[j] for j in cross.argmax(axis=-1)]              # (T,)
    return {"word": word, "output": outputs, "reads": reads}


def look_ahead(model, line: str) -> dict:
    """Per layer, the share of weight on later tokens; the masked-LM top-3 at each [MASK]."""
    seen = inspect(model, line)
    shares = [float(np.triu(w[0], 1).sum(-1).mean()) for w in seen.attentions]  # (H, T, T)
    result = {"line": line, "look_ahead": [round(s, 4) for s in shares]}
    mask_id = model.tokenizer.special_tokens.get("[MASK]")
    if getattr(model.cfg, "mlm_head", False) and mask_id is not None:
        positions = np.flatnonzero(seen.ids[0] == mask_id)
        probs = np.exp(seen.out[0] - seen.out[0].max(-1, keepdims=True))
        probs /= probs.sum(-1, keepdims=True)                        # (T, V)
        result["masks"] = [[(model.tokenizer.id_to_piece(int(i)), round(float(probs[p, i]), 4))
                            for i in np.argsort(-probs[p])[:3]] for p in positions]
    return result


def screenshots(seq2seq_page: Path | None, bert_page: Path | None, folder: Path) -> list[str]:
    from playwright.sync_api import sync_playwright
    shots = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1000, "height": 800})
        if seq2seq_page is not None:
            page.goto(seq2seq_page.resolve().as_uri())
            last = page.evaluate("window.glassformerViewer.layers().decoder.slice(-1)[0]")
            page.select_option("#dec-layer", str(last))
            page.locator("#cross-attention").screenshot(path=folder / "view_cross-attention.png")
            shots.append("view_cross-attention.png")
        if bert_page is not None:
            page.goto(bert_page.resolve().as_uri())
            for section in ("heatmap", "mlm"):
                page.locator(f"#{section}").screenshot(path=folder / f"view_bert_{section}.png")
                shots.append(f"view_bert_{section}.png")
        browser.close()
    return shots


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seq2seq", default=None, help="an encoder-decoder run or folder")
    parser.add_argument("--words", nargs="+", default=WORDS)
    parser.add_argument("--bert", default=None, help="a masked-LM BERT run or folder")
    parser.add_argument("--line", default=LINE)
    parser.add_argument("--out", type=Path, default=None, help="folder for the pages")
    parser.add_argument("--screenshots", type=Path, default=None, metavar="DIR")
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp())
    result, seq2seq_page, bert_page = {}, None, None
    if args.seq2seq:
        model = load_pretrained(args.seq2seq)
        result["seq2seq"] = [alignment(model, word) for word in args.words]
        for i, word in enumerate(args.words):
            path = show(model, word, out / f"seq2seq_{i}.html", name=Path(args.seq2seq).name)
            seq2seq_page = seq2seq_page or path
        for row in result["seq2seq"]:
            pairs = " ".join(f"{o}<-{r}" for o, r in zip(row["output"], row["reads"]))
            print(f"{row['word']:>12}  {pairs}")
    if args.bert:
        model = load_pretrained(args.bert)
        result["bert"] = look_ahead(model, args.line)
        bert_page = show(model, args.line, out / "bert.html", name=Path(args.bert).name,
                         lang="zh")
        shares = " ".join(f"{s:.0%}" for s in result["bert"]["look_ahead"])
        print(f"{args.line}  weight on later tokens per layer: {shares}")
        for guesses in result["bert"].get("masks", []):
            print("  [MASK] top-3: " + " ".join(f"{t} {p:.1%}" for t, p in guesses))
    if args.screenshots is not None:
        result["screenshots"] = screenshots(seq2seq_page, bert_page, args.screenshots)
    result["pages"] = str(out)
    print(json.dumps(result, ensure_ascii=False))


if __name__ == "__main__":
    main()
