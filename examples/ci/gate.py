#!/usr/bin/env python
"""Eval-CI gate: run lm-eval with `lover_hf`, write the results JSON, and fail when a metric row drops below its floor.

    python gate.py --model_args pretrained=Qwen/Qwen2.5-7B-Instruct,n_branches=10 --tasks lover_gsm8k --limit 200 \
        --floor lover_gsm8k:majority=0.80 --floor lover_gsm8k:lover_sum=0.78 --out results/lover.json

Each `--floor TASK:ROW=VALUE` names a metric row of the leaderboard (greedy, majority, cot_sum, lover_sum, ...;
`exact_match` is the metric). Exit status 0 when every row is at or above its floor, 1 otherwise (and 2 when a
named row is missing), so a CI job fails on a regression. `--results FILE` checks the floors on a results JSON
written before (this script's `--out`, or lm_eval's `results_*.json`) without evaluating again: one run, many gates.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from lm_eval import simple_evaluate


def parse_floor(text: str) -> tuple[str, str, float]:
    try:
        where, value = text.split("=")
        task, row = where.split(":")
        return task, row, float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--floor {text!r}: expected TASK:ROW=VALUE, e.g. lover_gsm8k:lover_sum=0.5")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model_args", default="")
    parser.add_argument("--tasks", help="comma-separated, e.g. lover_gsm8k (to evaluate)")
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--gen_kwargs", default=None)
    parser.add_argument("--floor", type=parse_floor, action="append", default=[], help="TASK:ROW=VALUE")
    parser.add_argument("--out", help="results JSON path (to evaluate)")
    parser.add_argument("--results", help="a results JSON written before: check its rows, evaluate nothing")
    args = parser.parse_args(argv)
    if args.results:
        evaluated = json.loads(Path(args.results).read_text())
    elif args.tasks and args.out:
        evaluated = simple_evaluate(model="lover_hf", model_args=args.model_args, tasks=args.tasks.split(","),
                                    limit=args.limit, gen_kwargs=args.gen_kwargs)
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({k: evaluated[k] for k in ("results", "config")}, indent=2,
                                             default=str))
    else:
        parser.error("pass --tasks and --out to evaluate, or --results FILE to check a results JSON written before")
    status = 0
    for task, row, floor in args.floor:
        value = evaluated["results"].get(task, {}).get(f"exact_match,{row}")
        if value is None:
            print(f"MISSING {task}:{row} (rows: {sorted(evaluated['results'].get(task, {}))})")
            return 2
        verdict = "ok" if value >= floor else "BELOW"
        print(f"{verdict:5} {task}:{row} = {value:.4f} (floor {floor:.4f})")
        status = status or int(value < floor)
    return status


if __name__ == "__main__":
    sys.exit(main())
