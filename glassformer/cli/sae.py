"""`glassformer sae`: train a sparse autoencoder on a model's residual stream, or evaluate one
(glassformer's or SAELens's folder); the work is glassformer/interpret/sae/run.py's."""
from __future__ import annotations

import argparse
import json
import sys

from glassformer.cli.common import add_model_argument, add_seed_argument, load_model_shown
from glassformer.cli.interp_html import add_html_arguments, check_html, write_html
from glassformer.errors import GlassformerError
from glassformer.interpret.sae.activations import hook_width
from glassformer.interpret.sae.model import SAEConfig
from glassformer.interpret.sae.run import StreamConfig, evaluate_folder, train_and_save
from glassformer.interpret.sae.train import SAETrainConfig
from glassformer.io.jsonl import read_text
from glassformer.packaged import data_help, data_path
from glassformer.viewer.interp_page import interp_page_data
from glassformer.viewer.sae_page import sae_folder_section

NAME = "sae"
HELP = ("sparse autoencoders on a model's residual stream: `train` one (ReLU + L1 or TopK, saved "
        "in SAELens's folder format), `eval` one (explained variance, L0, CE loss recovered), "
        "`features`: a page of its features")


def _add_common(cmd, *, tokens: bool) -> None:
    add_seed_argument(cmd, default=argparse.SUPPRESS)
    add_model_argument(cmd, "causal LM whose activations the SAE reads")
    cmd.add_argument("--data", required=True, type=data_path, metavar="TEXT",
                     help=data_help("UTF-8 text the model reads"))
    if tokens:
        cmd.add_argument("--tokens", type=int, default=StreamConfig.tokens, metavar="N",
                         help=f"training positions read from the start of the text (default: "
                              f"{StreamConfig.tokens}); their activations are held in memory, "
                              "estimated first")
    cmd.add_argument("--eval-tokens", type=int, default=StreamConfig.eval_tokens, metavar="N",
                     help=f"held-out positions for the metrics (default: "
                          f"{StreamConfig.eval_tokens}; after the training ones)")
    cmd.add_argument("--context", type=int, default=StreamConfig.context, metavar="T",
                     help=f"tokens per window the model reads (default: {StreamConfig.context})")
    cmd.add_argument("--rows-per-forward", type=int, default=StreamConfig.rows_per_forward,
                     metavar="B", help="windows per forward pass (default: "
                                       f"{StreamConfig.rows_per_forward})")
    cmd.add_argument("--json", action="store_true", help="print one JSON object at the end")


def add_arguments(parser) -> None:
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True,
                                    help="train (make an SAE), eval (measure one) or features "
                                         "(a page of its features)")
    train = actions.add_parser("train", help="train an SAE on one hook's activations",
                               description="train an SAE on one hook's activations over a text")
    _add_common(train, tokens=True)
    train.add_argument("--hook", required=True, metavar="NAME",
                       help="where it reads: a hook point with one vector per position, e.g. "
                            "blocks.L.hook_resid_post, blocks.L.hook_mlp_out")
    train.add_argument("--out", required=True, metavar="DIR",
                       help="folder for cfg.json + sae_weights.safetensors (SAELens's format)")
    train.add_argument("--arch", choices=("relu", "topk"), default="relu",
                       help="relu: ReLU + decoder-norm-weighted L1 (SAELens 'standard', the "
                            "default); topk: keep each position's K largest features")
    train.add_argument("--k", type=int, default=32, help="TopK: features per position (32)")
    train.add_argument("--aux-k", type=float, default=1.0,
                       help="TopK: the coefficient of the auxiliary loss that gives dead features "
                            "a gradient (SAELens's aux_loss_coefficient; 0 turns it off; 1)")
    train.add_argument("--expansion", type=int, default=8,
                       help="features per input dimension: d_sae = expansion * the hook's width "
                            "(8)")
    train.add_argument("--l1", type=float, default=5.0,
                       help="ReLU: the L1 coefficient, on inputs scaled to norm sqrt(d_model) (5)")
    defaults = SAETrainConfig()
    train.add_argument("--steps", type=int, default=defaults.steps, help=f"Adam steps "
                                                                         f"({defaults.steps})")
    train.add_argument("--batch", type=int, default=defaults.batch,
                       help=f"activation rows per step ({defaults.batch})")
    train.add_argument("--lr", type=float, default=defaults.lr,
                       help=f"Adam's learning rate ({defaults.lr})")
    train.add_argument("--dead-window", type=int, default=defaults.dead_window,
                       help="steps without firing after which a feature counts as dead "
                            f"({defaults.dead_window})")
    train.add_argument("--log-every", type=int, default=defaults.log_every,
                       help=f"steps between log lines ({defaults.log_every})")
    train.set_defaults(run_action=run_train)
    evaluate = actions.add_parser("eval", help="measure a saved SAE (glassformer's or "
                                               "SAELens's folder)",
                                  description="explained variance, L0 and CE loss recovered "
                                              "of a saved SAE")
    _add_common(evaluate, tokens=False)
    evaluate.add_argument("--sae", required=True, metavar="DIR",
                          help="an SAE folder: cfg.json + sae_weights.safetensors")
    evaluate.add_argument("--hook", default=None, metavar="NAME",
                          help="where it reads (default: the folder's hook_name)")
    evaluate.add_argument("--skip-tokens", type=int, default=0, metavar="N",
                          help="start N tokens into the text (0); a train run's --tokens gives "
                               "its held-out positions, the ones its report measured")
    evaluate.set_defaults(run_action=run_eval)
    add_features_action(actions)


def add_features_action(actions) -> None:
    """`sae features`: a saved SAE's feature pages (viewer/sae_page.py) as one HTML page."""
    features = actions.add_parser("features", help="write a page of a saved SAE's features: "
                                                   "top activating contexts, logit effect",
                                  description="the features of a saved SAE over a text: each "
                                              "one's top activating contexts and logit effect, "
                                              "as one offline HTML page")
    add_seed_argument(features, default=argparse.SUPPRESS)
    add_model_argument(features, "causal LM whose activations the SAE reads")
    features.add_argument("--data", required=True, type=data_path, metavar="TEXT",
                          help=data_help("UTF-8 text the model reads"))
    features.add_argument("--sae", required=True, metavar="DIR",
                          help="an SAE folder: cfg.json + sae_weights.safetensors")
    features.add_argument("--hook", default=None, metavar="NAME",
                          help="where it reads (default: the folder's hook_name)")
    features.add_argument("--tokens", type=int, default=4096, metavar="N",
                          help="positions of the text searched for top contexts (4096)")
    features.add_argument("--skip-tokens", type=int, default=0, metavar="N",
                          help="start N tokens into the text (0)")
    features.add_argument("--context", type=int, default=StreamConfig.context, metavar="T",
                          help=f"tokens per window the model reads ({StreamConfig.context})")
    features.add_argument("--rows-per-forward", type=int, default=StreamConfig.rows_per_forward,
                          metavar="B", help="windows per forward pass "
                                            f"({StreamConfig.rows_per_forward})")
    features.add_argument("--feature", default=None, metavar="F,G,...",
                          help="the features to show (default: the --count that fire hardest)")
    features.add_argument("--count", type=int, default=8,
                          help="features shown when --feature is not given (8)")
    add_html_arguments(features, "the feature pages")
    features.set_defaults(run_action=run_features)


def run_features(args) -> int:
    if args.html is None:
        raise GlassformerError("sae features writes a page: give --html PAGE")
    check_html(args)
    stream = StreamConfig(tokens=args.tokens, eval_tokens=1, context=args.context,
                          rows_per_forward=args.rows_per_forward)
    if args.skip_tokens < 0 or args.count < 1:
        raise GlassformerError(f"--skip-tokens must be >= 0 and --count >= 1, got "
                               f"{args.skip_tokens} and {args.count}")
    try:
        chosen = None if args.feature is None else [int(f) for f in args.feature.split(",")]
    except ValueError:
        raise GlassformerError(f"--feature takes comma-separated integers, got {args.feature!r}")
    text = read_text(args.data)
    model = load_model_shown(args.model)
    section = sae_folder_section(model, args.sae, text, args.hook, tokens=stream.tokens,
                                 context=stream.context, skip_tokens=args.skip_tokens,
                                 features=chosen, count=args.count,
                                 rows_per_forward=stream.rows_per_forward)
    write_html(args, interp_page_data(str(args.model), sae=section))
    print(f"{len(section['features'])} features of {section['name']} at {section['hook']}: "
          + ", ".join(f"#{f['index']} (max {f['max']:.2f})" for f in section["features"]))
    return 0


def _stream(args, tokens: int) -> StreamConfig:
    return StreamConfig(tokens=tokens, eval_tokens=args.eval_tokens, context=args.context,
                        rows_per_forward=args.rows_per_forward)


def _progress(kind: str, info: dict) -> None:
    """One line on stderr per event: gathering, a training log line, the evaluation."""
    if kind == "gather":
        print(f"activations: {info['windows']}/{info['of']} windows", file=sys.stderr,
              flush=True)
    elif kind == "train":
        print(f"step {info['step']:>6}  loss {info['loss']:.4f}  mse {info['mse']:.4f}  "
              f"l1 {info['l1']:.4f}  L0 {info['l0']:.1f}  dead {info['dead']}  "
              f"explained variance {info['explained_variance']:.3f}", file=sys.stderr,
              flush=True)


def _print_metrics(metrics: dict) -> None:
    print(f"explained variance  {metrics['explained_variance']:.4f}")
    print(f"L0                  {metrics['l0']:.1f} features per position")
    print(f"dead on eval        {metrics['dead_on_eval']} features fired nowhere "
          f"({metrics['positions']} positions)")
    print(f"CE loss             clean {metrics['ce_clean']:.4f}  with SAE {metrics['ce_sae']:.4f}"
          f"  zero-ablated {metrics['ce_zero']:.4f}")
    print(f"CE loss recovered   {metrics['ce_loss_recovered']:.4f}")


def run_train(args) -> int:
    stream = _stream(args, args.tokens)                  # every setting checked before loading
    if args.expansion < 1:
        raise GlassformerError(f"--expansion must be >= 1, got {args.expansion}")
    tcfg = SAETrainConfig(steps=args.steps, batch=args.batch, lr=args.lr,
                          dead_window=args.dead_window, log_every=args.log_every)
    text = read_text(args.data)
    model = load_model_shown(args.model)
    width = hook_width(model, args.hook)
    cfg = SAEConfig(d_in=width, d_sae=args.expansion * width,
                    arch=args.arch, k=args.k if args.arch == "topk" else None,
                    l1=args.l1 if args.arch == "relu" else 0.0,
                    aux_k=args.aux_k if args.arch == "topk" else 0.0)
    report = train_and_save(model, args.model, text, args.hook, cfg, tcfg, stream, args.out,
                            seed=args.seed, log=_progress)
    if args.json:
        print(json.dumps(report))
        return 0
    print(f"saved {report['out']} ({cfg.arch}, d_sae {cfg.d_sae}, {report['train_rows']:,} "
          f"training rows, {report['sinks_dropped']} attention-sink positions left out)")
    _print_metrics(report["eval"])
    return 0


def run_eval(args) -> int:
    stream = _stream(args, 1)
    text = read_text(args.data)
    model = load_model_shown(args.model)
    report = evaluate_folder(model, args.sae, text, args.hook, stream,
                             skip_tokens=args.skip_tokens)
    if args.json:
        print(json.dumps(report))
        return 0
    print(f"{report['sae']}: {report['arch']}, d_sae {report['d_sae']}, at {report['hook']}")
    _print_metrics(report)
    return 0


def run(args) -> int:
    return args.run_action(args)
