"""`glassformer show --model M [--out page.html] [--png DIR] [--layers ...] [--heads ...] TEXT`.

One self-contained HTML page of what the model computes on TEXT (glassformer/viewer/). For an
encoder-decoder TEXT is the source: `--target OUTPUT`, or the model's own greedy translation.
"""
from __future__ import annotations

import os

from glassformer.cli.common import add_model_argument, detect_lang, load_model_shown
from glassformer.viewer.show import check_request, show

NAME = "show"
HELP = ("write one offline HTML page showing a model's attention, logit lens and residual stream "
        "(and a mixture-of-experts model's routing)")


def add_arguments(parser) -> None:
    add_model_argument(parser, "the model to look inside")
    parser.add_argument("--out", default="glassformer_show.html",
                        help="the HTML file to write (default: glassformer_show.html)")
    parser.add_argument("--png", default=None, metavar="DIR",
                        help="also write the views as PNG figures into DIR, made if missing "
                             "(needs matplotlib)")
    parser.add_argument("--layers", default=None,
                        help="layers to include, e.g. 0,2,5-7 (default: all)")
    parser.add_argument("--heads", default=None,
                        help="heads to include, e.g. 0-3 (default: all)")
    parser.add_argument("--max-page-mb", type=float, default=None, metavar="MB",
                        help="the page's budget for attention, in MB (default: 12); past it "
                             "show refuses before computing, naming --layers and --heads that "
                             "fit (decoders and encoders)")
    parser.add_argument("--max-png-mpixels", type=float, default=None, metavar="MPIXELS",
                        help="with --png: the largest figure, in millions of pixels (default: "
                             "100, about 0.4 GB to draw); past it show refuses before "
                             "computing, naming the value that fits")
    parser.add_argument("--top-k", type=int, default=5,
                        help="guesses per cell in the logit lens, or per position of a "
                             "masked-LM BERT (default: 5)")
    parser.add_argument("--pad-to", type=int, default=None, metavar="N",
                        help="encoders (BERT): append padding up to N tokens, to see it ignored")
    parser.add_argument("--target", default=None, metavar="TEXT",
                        help="encoder-decoders: the output to show for the source TEXT "
                             "(default: the model's own greedy translation)")
    parser.add_argument("--lang", choices=["en", "zh"], default=None,
                        help="page language, switchable on the page (default: from the locale)")
    parser.add_argument("text",
                        help="the text to run the model on (an encoder-decoder: the source)")


def run(args) -> int:
    lang = args.lang or detect_lang(os.environ)
    check_request(args.text, args.out, args.png)  # before the (slow) load
    model = load_model_shown(args.model)
    path = show(model, args.text, args.out, name=os.path.basename(str(args.model).rstrip("/")),
                lang=lang, layers=args.layers, heads=args.heads, top_k=args.top_k,
                png_dir=args.png, pad_to=args.pad_to, target=args.target,
                max_page_mb=args.max_page_mb, max_png_mpixels=args.max_png_mpixels)
    print(f"wrote {path} ({path.stat().st_size / 1e6:.2f} MB)")
    return 0
