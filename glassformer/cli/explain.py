"""`glassformer explain PART`: one part of a Transformer step by step, forward and backward."""
from __future__ import annotations

import json
import os

from glassformer.cli.common import detect_lang
from glassformer.explain.constrained import explain_constrained
from glassformer.explain.parts import PARTS, WALKTHROUGHS, explain_part
from glassformer.explain.render import render_text, to_json

NAME = "explain"
HELP = ("walk through one part (attention, layer_norm, gelu, softmax, rope, mha, block, gpt2, "
        "...) step by step: shapes, intermediate arrays, gradients checked by finite differences")

# Options handed to the part; None means "the part's default". A part rejects one it does not take.
PART_OPTIONS = ("batch", "seq", "d_model", "d_k", "heads", "kv_heads", "bidirectional",
                "approximate", "ckpt", "prompt", "window")


def add_arguments(parser) -> None:
    parser.add_argument("part", choices=list(PARTS) + list(WALKTHROUGHS) + ["constrained"],
                        help="which part to explain (eval: how a benchmark scores one item; "
                             "constrained: a JSON schema's token masks)")
    parser.add_argument("--lang", choices=["zh", "en"], default=None,
                        help="language of labels and explanations (default: from the locale)")
    parser.add_argument("--backward", action="store_true",
                        help="continue with the backward pass of L = sum(out * G) and a "
                             "finite-difference check")
    parser.add_argument("--grad", choices=["ones", "random"], default="ones",
                        help="upstream gradient G for --backward (default: ones)")
    parser.add_argument("--batch", type=int, default=None, help="batch size B")
    parser.add_argument("--seq", type=int, default=None, help="tokens T")
    parser.add_argument("--d-model", type=int, default=None,
                        help="width C (the class count V for cross_entropy, F for swiglu)")
    parser.add_argument("--d-k", type=int, default=None,
                        help="attention: head width D (with any size given, the inputs are "
                             "random instead of the seed's)")
    parser.add_argument("--heads", type=int, default=None, help="attention heads H")
    parser.add_argument("--kv-heads", type=int, default=None,
                        help="mha: key/value heads K, dividing H (default: H/2 when H is even)")
    # note: None when absent (not False), so that parts without a mask do not see it as given
    parser.add_argument("--bidirectional", action="store_const", const=True, default=None,
                        help="attention: no causal mask (encoder/BERT-style)")
    parser.add_argument("--approximate", choices=["none", "tanh"], default=None,
                        help="gelu: exact erf form (none, default) or GPT-2's tanh form")
    parser.add_argument("--ckpt", default=None,
                        help="gpt2, cross_attention: a trained model folder (run, checkpoint "
                             "or HF; cross_attention: an encoder-decoder run) instead of the "
                             "tiny random model; eval: the model scored (default: smollm2 "
                             "when installed)")
    parser.add_argument("--prompt", default=None,
                        help="gpt2: the text to run (default: hello; the tiny random model knows "
                             "lowercase letters, space and .,;!?'); cross_attention --ckpt: the "
                             "source text to translate")
    parser.add_argument("--window", type=int, default=None,
                        help="window: the sliding window W, keys each query sees (< --seq)")
    parser.add_argument("--json", action="store_true",
                        help="print every array as JSON under stable keys instead of prose")


def run(args) -> int:
    if args.part == "constrained":                 # not an op: no arrays, no gradients
        print(explain_constrained(args.lang or detect_lang(os.environ)), end="")
        return 0
    given = {name: getattr(args, name) for name in PART_OPTIONS}
    result = explain_part(args.part, given, seed=args.seed,
                          grad=args.grad if args.backward else None)
    if args.json:
        print(json.dumps(to_json(result), ensure_ascii=False))
        return 0
    print(render_text(result, args.lang or detect_lang(os.environ)), end="")
    return 0
