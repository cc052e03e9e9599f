"""`glassformer eval --task arc_easy,piqa | --core --data-dir DIR --model M`: benchmark accuracy
by few-shot log-likelihood scoring (tasks/evaluate/), the CORE score, a results JSON with every
item's log-likelihoods, and `--compare OLD.json` to see what changed item by item."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from tqdm import tqdm

from glassformer.cli.common import detect_lang, load_model_shown
from glassformer.errors import GlassformerError
from glassformer.tasks.evaluate.generative import MAX_NEW_TOKENS, ROWS, evaluate_generative
from glassformer.tasks.evaluate.gsm8k import read_problems
from glassformer.tasks.evaluate.items import read_items
from glassformer.tasks.evaluate.metrics import stderr
from glassformer.tasks.evaluate.results import (compare, read_results, results_record,
                                                write_results)
from glassformer.tasks.evaluate.run_task import evaluate_task
from glassformer.tasks.evaluate.tasks_table import CORE_TASKS, GENERATION, TASKS
from glassformer.viewer.eval_page import SCRIPTS, eval_item_data
from glassformer.viewer.page import write_page


def add_task_arguments(parser) -> None:
    parser.add_argument("--task", default=None, metavar="T1,T2",
                        help="benchmark tasks to score, comma-separated (names: "
                             f"{', '.join(TASKS)}); needs --data-dir")
    parser.add_argument("--core", action="store_true",
                        help="score the 18 CORE tasks and report CORE (mean centred accuracy)")
    parser.add_argument("--data-dir", default=None, metavar="DIR",
                        help="--task/--core: the folder of the task JSONL files")
    parser.add_argument("--shots", type=int, default=None, metavar="K",
                        help="--task/--core: few-shot examples per item (default: each "
                             "task's DCLM count)")
    parser.add_argument("--out", default=None, metavar="FILE",
                        help="--task/--core: the results JSON (default: eval_results.json)")
    parser.add_argument("--compare", default=None, metavar="RESULTS.json",
                        help="--task/--core: compare with an earlier results JSON item by item")
    parser.add_argument("--max-new-tokens", type=int, default=MAX_NEW_TOKENS, metavar="N",
                        help="--task gsm8k: the most tokens a reply may have (default: "
                             f"{MAX_NEW_TOKENS}); replies are written {ROWS} at a time "
                             "(--batch-size)")
    parser.add_argument("--view", type=int, default=None, metavar="LINE",
                        help="--task T: instead of a run, write a page (--html) of the item on "
                             "this line of T's file: each option's tokens and their "
                             "probabilities (the lines a results JSON and --compare name)")
    parser.add_argument("--html", default="eval_item.html", metavar="FILE",
                        help="--view: the page to write (default: eval_item.html)")
    parser.add_argument("--lang", choices=["en", "zh"], default=None,
                        help="--view: the page's language (default: from the locale)")


def is_task_run(args) -> bool:
    return args.task is not None or args.core


def chosen_tasks(args) -> list:
    """The TaskSpecs asked for, or a one-line error naming the known ones."""
    if args.core:
        return list(CORE_TASKS)
    names = [name.strip() for name in args.task.split(",") if name.strip()]
    unknown = [name for name in names if name not in TASKS]
    if unknown or not names:
        raise GlassformerError(f"unknown task {', '.join(unknown) or repr(args.task)}; "
                               f"known tasks: {', '.join(TASKS)}")
    return [TASKS[name] for name in names]


def check_arguments(args) -> list:
    specs = chosen_tasks(args)
    if args.limit is not None and args.limit < 1:
        raise GlassformerError(f"--limit must be at least 1, got {args.limit}")
    if args.shots is not None and args.shots < 0:
        raise GlassformerError(f"--shots must be 0 or more, got {args.shots}")
    if args.data_dir is None:
        raise GlassformerError("--task/--core read the task files from --data-dir DIR")
    if not Path(args.data_dir).is_dir():
        raise GlassformerError(f"data dir {args.data_dir} does not exist")
    for spec in specs:   # every file read and checked before the model loads
        if not (Path(args.data_dir) / spec.file).is_file():
            raise GlassformerError(f"{spec.name}: {Path(args.data_dir) / spec.file} does not "
                                   "exist")
        if spec.kind == GENERATION:
            read_problems(Path(args.data_dir) / spec.file)
        else:
            read_items(Path(args.data_dir) / spec.file, spec.kind)
    if args.max_new_tokens < 1:
        raise GlassformerError(f"--max-new-tokens must be at least 1, got {args.max_new_tokens}")
    if args.batch_size is not None and args.batch_size < 1:
        raise GlassformerError(f"--batch-size must be at least 1, got {args.batch_size}")
    return specs


def task_line(result) -> str:
    line = (f"{result.name:34s} n={result.n:<5d} acc {result.acc:.4f} ± "
            f"{stderr(result.acc, result.n):.4f}")
    if result.acc_norm is not None:
        line += f"  acc_norm {result.acc_norm:.4f} ± {stderr(result.acc_norm, result.n):.4f}"
    tps = result.tokens / result.seconds if result.seconds else 0.0
    return (f"{line}  centred {result.centred:+.4f}  {result.seconds:.1f} s "
            f"({tps:,.0f} tokens/s)")


def run_view(args, specs) -> int:
    """The page of one item: `--task T --view LINE --html FILE`."""
    if len(specs) != 1 or specs[0].kind == GENERATION:
        raise GlassformerError("--view shows one item of one scored task: give --task T (one "
                               "multiple-choice, schema or language-modelling task)")
    spec = specs[0]
    items = read_items(Path(args.data_dir) / spec.file, spec.kind)
    lines = [item.line for item in items]
    if args.view not in lines:
        raise GlassformerError(f"--view {args.view}: {spec.file} has items on lines "
                               f"{lines[0]}-{lines[-1]}")
    if not Path(args.html).resolve().parent.is_dir():
        raise GlassformerError(f"cannot write {args.html}: its folder does not exist")
    model = load_model_shown(args.model, args.adapter, args.dequantize, args.activation_quant)
    shots = spec.shots if args.shots is None else args.shots
    data = eval_item_data(model, spec, items, lines.index(args.view), shots,
                          name=str(args.model))
    lang = args.lang or detect_lang(os.environ)
    write_page(args.html, data, title=f"{spec.name} line {args.view}", lang=lang,
               scripts=SCRIPTS)
    print(f"wrote {args.html}")
    return 0


def run_tasks(args) -> int:
    specs = check_arguments(args)
    if args.view is not None:
        return run_view(args, specs)
    old = read_results(args.compare) if args.compare else None
    # --dequantize: a GGUF's matrices widened once on load (the same numbers: the products
    # widen the same blocks anyway); each forward then skips that, faster on small forwards
    model = load_model_shown(args.model, args.adapter, args.dequantize, args.activation_quant)
    show = not args.no_progress and sys.stderr.isatty()
    results, said = [], False
    for spec in specs:
        with tqdm(disable=not show, file=sys.stderr, unit="item", desc=spec.name) as bar:

            def on_item(done: int, total: int) -> None:
                bar.total = total
                bar.update(done - bar.n)

            if spec.kind == GENERATION:
                result = evaluate_generative(model, spec, args.data_dir, limit=args.limit,
                                             shots=args.shots, on_item=on_item,
                                             max_new_tokens=args.max_new_tokens,
                                             rows=args.batch_size or ROWS)
            else:
                result = evaluate_task(model, spec, args.data_dir, limit=args.limit,
                                       shots=args.shots, on_item=on_item)
        if result.truncated and not said:
            print(f"eval: prompts longer than the model's context ({model.context_len} "
                  "tokens) are truncated from the left, as lm-eval does", file=sys.stderr)
            said = True
        results.append(result)
        if not args.json:
            print(task_line(result), flush=True)
    record = results_record(results, model=str(args.model), adapter=args.adapter,
                            shots=args.shots, limit=args.limit)
    out = args.out or "eval_results.json"
    write_results(out, record)
    if args.json:
        summary = {key: value for key, value in record.items() if key != "tasks"}
        summary["tasks"] = {name: {k: v for k, v in task.items() if k != "items"}
                            for name, task in record["tasks"].items()}
        summary["results_file"] = out
        if old is not None:
            summary["compare"] = compare(old, record)
        print(json.dumps(summary))
        return 0
    core = record["core"]
    if core["name"]:
        print(f"{core['name']}: {core['value']:.4f} (mean centred accuracy)")
    kept = ("replies" if all(spec.kind == GENERATION for spec in specs)
            else "log-likelihoods")
    print(f"results with every item's {kept}: {out}")
    if old is not None:
        for row in compare(old, record):
            lines = ", ".join(str(c["line"]) for c in row["changed"]) or "none"
            print(f"{row['task']}: acc {row['acc_before']:.4f} -> {row['acc_after']:.4f} "
                  f"({row['difference']:+.4f}); answer changed on lines: {lines}")
    return 0
