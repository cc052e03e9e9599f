"""`glassformer gradcheck [NAME ...] [--json]`: float64 finite differences for every op and block."""
from __future__ import annotations

import json

from glassformer.errors import GlassformerError
from glassformer.gradcheck import DEFAULT_TOLERANCE, all_cases, run_case

NAME = "gradcheck"
HELP = "check every hand-written backward against float64 central differences"


def add_arguments(parser) -> None:
    parser.add_argument("names", nargs="*", metavar="NAME",
                        help="ops or blocks to check (default: all); e.g. attention layer_norm")
    parser.add_argument("--json", action="store_true",
                        help="print a JSON list of {name, mode, max_rel_err, ok} instead of a table")
    parser.add_argument("--tolerance", type=float, default=DEFAULT_TOLERANCE,
                        help=f"largest relative error that passes (default: {DEFAULT_TOLERANCE:g})")


def run(args) -> int:
    cases = all_cases()
    known = sorted({case.name for case in cases})
    unknown = [name for name in args.names if name not in known]
    if unknown:
        raise GlassformerError(f"unknown op or block {', '.join(unknown)}; "
                               f"known: {', '.join(known)}")
    chosen = [case for case in cases if not args.names or case.name in args.names]
    results = [run_case(case, seed=args.seed, tolerance=args.tolerance) for case in chosen]
    if args.json:
        rows = [{"name": r.name, "mode": r.mode, "max_rel_err": r.max_rel_err, "ok": r.ok}
                for r in results]
        print(json.dumps(rows, indent=1))
    else:
        print(f"{'name':<22} {'mode':<22} {'max rel err':>12}  ok")
        for r in results:
            print(f"{r.name:<22} {r.mode:<22} {r.max_rel_err:>12.2e}  {'yes' if r.ok else 'NO'}")
        failed = sum(not r.ok for r in results)
        print(f"{len(results) - failed} passed, {failed} failed (tolerance {args.tolerance:g})")
    return 0 if all(r.ok for r in results) else 1
