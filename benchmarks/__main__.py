"""The benchmark runner.

    python -m benchmarks list
    python -m benchmarks run NAME [--scale S] [--rounds N] [--set KEY=VALUE …] [--smallest]
                                  [--revision REV] [--json FILE]
    python -m benchmarks report
    python -m benchmarks compare NAME [--runs OLD,NEW] [--measure M,…] [--top N]

``run`` measures the code of a git revision (default ``HEAD``) from a frozen copy of it — a
worktree in a temporary directory, byte-compiled as an install is, on ``PYTHONPATH`` — so that an
editable install never measures half-edited code; uncommitted changes are not measured (``--here``
runs the checkout as it is, for the test suite). Each run appends its measures as JSON lines to
``benchmarks/results/NAME.jsonl`` (and to ``--json FILE``); ``report`` writes BENCHMARKS.md's
opening section from the latest run of every scenario; ``compare`` prints two runs of a scenario side
by side (:mod:`benchmarks.compare`). Run benchmarks on an idle machine, one at a time.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks import compare, report
from benchmarks.harness import ROOT, Bench
from benchmarks.scenarios import scenarios

RESULTS = ROOT / "benchmarks" / "results"


def _list() -> None:
    for scenario in scenarios().values():
        print(f"{scenario.name:16} {scenario.summary}")
        for key, p in scenario.parameters.items():
            print(f"{'':16}   --set {key}=… ({p.help}; default {p.default}, smallest {p.smallest})")


def _frozen(args: argparse.Namespace, argv: list[str]) -> int:
    """Run this command again from a worktree of ``--revision``, its results written here."""
    with tempfile.TemporaryDirectory(prefix="bench-rev-") as tmp:
        tree = Path(tmp) / "tree"
        subprocess.run(["git", "worktree", "add", "--detach", "--quiet", str(tree), args.revision], cwd=ROOT,
                       check=True)
        try:
            # Byte-compiled once, as pip's install of mvlog is: where PYTHONDONTWRITEBYTECODE is set
            # (this machine), every mvlog process would otherwise compile its ~120 modules again
            # (~0.15 s of each command's start, BENCHMARKS.md session 52).
            subprocess.run([sys.executable, "-m", "compileall", "-q", str(tree / "src"), str(tree / "benchmarks")],
                           check=True, stdout=subprocess.DEVNULL)
            env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree / "src"), str(tree)])}
            return subprocess.run([sys.executable, "-m", "benchmarks", *argv, "--here",
                                   "--results", str(args.results)], cwd=tree, env=env).returncode
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, check=False)


def _run(args: argparse.Namespace, argv: list[str]) -> int:
    found = scenarios()
    if args.name not in found:
        raise SystemExit(f"no scenario {args.name!r}; `python -m benchmarks list` names them")
    if not args.here:
        return _frozen(args, argv)
    scenario = found[args.name]
    given = dict(item.split("=", 1) for item in args.set)
    if args.scale is not None:
        given["scale"] = args.scale
    if args.rounds is not None:
        given["rounds"] = args.rounds
    parameters = scenario.values(args.smallest, **given)
    with Bench(scenario.name, parameters) as bench:
        scenario.run(bench, parameters)
    lines = [json.dumps(record, sort_keys=True) for record in bench.records()]
    if not lines:
        raise SystemExit(f"{scenario.name} measured nothing")
    for target in [args.results / f"{scenario.name}.jsonl", *([Path(args.json)] if args.json else [])]:
        target.parent.mkdir(parents=True, exist_ok=True)
        with target.open("a", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
    print(report.run_table(bench.records()))
    return 0


def _compare(args: argparse.Namespace) -> int:
    try:
        old, new = compare.pick(report.load(RESULTS).get(args.name, []), [n for n in args.runs.split(",") if n])
    except ValueError as exc:
        raise SystemExit(f"{args.name}: {exc}") from None
    print(compare.table(old, new, [m for m in args.measure.split(",") if m], args.top))
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("list", help="the scenarios and their parameters")
    run = commands.add_parser("run", help="run one scenario")
    run.add_argument("name")
    run.add_argument("--scale", type=float)
    run.add_argument("--rounds", type=int)
    run.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="another parameter")
    run.add_argument("--smallest", action="store_true", help="every parameter at its smallest")
    run.add_argument("--revision", default="HEAD", help="the git revision measured (default HEAD)")
    run.add_argument("--here", action="store_true", help="measure this checkout as it is (no frozen copy)")
    run.add_argument("--json", help="also append the run's JSON lines to this file")
    run.add_argument("--results", type=Path, default=RESULTS, help=argparse.SUPPRESS)
    commands.add_parser("report", help="write BENCHMARKS.md's opening section from the latest results")
    compared = commands.add_parser("compare", help="two runs of a scenario side by side")
    compared.add_argument("name")
    compared.add_argument("--runs", default="", help="OLD,NEW: each the start of a run's revision or start time "
                          "(default: the latest two with the latest's parameters)")
    compared.add_argument("--measure", default="", help="only these measures (comma-separated)")
    compared.add_argument("--top", type=int, default=40, help="how many of the largest moves to show")
    args = parser.parse_args(argv)
    if args.command == "list":
        _list()
        return 0
    if args.command == "report":
        report.write(RESULTS, ROOT / "BENCHMARKS.md")
        return 0
    if args.command == "compare":
        return _compare(args)
    return _run(args, argv)


if __name__ == "__main__":
    sys.exit(main())
