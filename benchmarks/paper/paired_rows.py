"""Paired bootstrap of two leaderboard rows on the questions both cover, from saved `lover compare` runs.

`lover compare` writes every strategy's 0/1 outcome per task and doc_id to `per_question.jsonl`, so two rows can be
compared after the fact: two strategies of one run, or the same strategy in two runs (another fit, another verifier)
on the same questions, and on a doc_id range only (e.g. the questions a larger run added to a smaller one):

    python -m benchmarks.paper.paired_rows RUN:lover_sum RUN:majority --docs 100:250
    python -m benchmarks.paper.paired_rows A:lover_sum B/per_question.jsonl:lover_sum --task lover_gsm8k
    python -m benchmarks.paper.paired_rows RUN:lover_sum RUN:majority --task all   # every task's questions pooled
    python -m benchmarks.paper.paired_rows RUN --minus majority --out RUN/vs_majority.json   # every row of RUN

`--minus BASE` pairs every row of one run with BASE, each interval seeded as `lover compare` seeds its own
(`stats.interval_rng(seed, task, row, BASE)`), so the rows compare also reports (lover_sum − majority) read the same.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from lover_lmeval.core.files import write_text
from lover_lmeval.core.stats import bootstrap_interval, interval_rng, paired_bootstrap

from benchmarks.bench_common import docs_range


def run_lines(run: str, task: str | None) -> tuple[Path, str, list[dict]]:
    """RUN (a `lover compare --out` folder or its per_question.jsonl) -> (its file, the task, the task's lines); the
    task may be left out when the run has only one, and "all" pools every task's questions."""
    path = Path(run) / "per_question.jsonl" if Path(run).is_dir() else Path(run)
    if not path.is_file():
        raise SystemExit(f"{path} does not exist: re-run `lover compare` (banked runs cost no decoding)")
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    tasks = sorted({line["task"] for line in lines})
    if task is None:
        if len(tasks) != 1:
            raise SystemExit(f"{path} has tasks {', '.join(tasks)}: pick one with --task (or --task all)")
        task = tasks[0]
    if task not in tasks + ["all"]:
        raise SystemExit(f"--task {task!r} is not in {path} (it has {', '.join(tasks)}; or 'all' to pool them)")
    return path, task, [line for line in lines if task in (line["task"], "all")]


def row_outcomes(path: Path, lines: list[dict], row: str) -> dict[tuple[str, int], int]:
    """{(task, doc_id): 0/1} of one row of a run's lines; SystemExit naming the rows it has otherwise."""
    if row not in lines[0]:
        rows = [name for name in lines[0] if name not in ("task", "doc_id")]
        raise SystemExit(f"row {row!r} is not in {path} (rows: {', '.join(rows)})")
    return {(line["task"], line["doc_id"]): line[row] for line in lines}


def outcomes(spec: str, task: str | None) -> tuple[str, dict[tuple[str, int], int]]:
    """'RUN:ROW' -> (task, {(task, doc_id): 0/1}), RUN and the task as `run_lines` reads them."""
    run, sep, row = spec.rpartition(":")
    if not sep or not run or not row:
        raise SystemExit(f"{spec!r} must be RUN:ROW, e.g. results/compare:lover_sum")
    path, task, lines = run_lines(run, task)
    return task, row_outcomes(path, lines, row)


def every_row_minus(run: str, base: str, task: str | None, n_boot: int, seed: int) -> dict:
    """Every row of one run (a folder or its per_question.jsonl) minus `base`, paired on its questions, each
    interval drawn from `interval_rng(seed, task, row, base)` as `lover compare` draws its paired rows."""
    path, task, lines = run_lines(run, task)
    base_rows = row_outcomes(path, lines, base)
    ids = sorted(base_rows)
    second = np.array([base_rows[i] for i in ids], dtype=float)
    rows = {}
    for row in (name for name in lines[0] if name not in ("task", "doc_id", base)):
        values = row_outcomes(path, lines, row)
        scored = np.array([values[i] for i in ids], dtype=float)
        rows[row] = paired = {"acc": float(scored.mean()),
                              **paired_bootstrap(scored, second, n_boot, interval_rng(seed, task, row, base))}
        print(f"{row:24s} {paired['acc']:.3f}  {paired['diff']:+.3f} [{paired['low']:+.3f}, {paired['high']:+.3f}]")
    return {"task": task, "n": len(ids), "run": run, "base": base, "acc_base": float(second.mean()),
            "n_boot": n_boot, "seed": seed, "rows": rows}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("a", help="RUN:ROW, e.g. results/compare:lover_sum (with --minus: RUN alone)")
    parser.add_argument("b", nargs="?", help="RUN:ROW, the row subtracted (not with --minus)")
    parser.add_argument("--minus", default=None, help="BASE: every row of the run a names minus BASE, e.g. majority")
    parser.add_argument("--out", default=None, help="with --minus: write the rows to this JSON file")
    parser.add_argument("--task", default=None, help="task of a leaderboard with several, or 'all' to pool them")
    parser.add_argument("--docs", default=None, help="doc_id range START:END (END excluded), e.g. 100:250")
    parser.add_argument("--n_boot", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if (args.minus is None) == (args.b is None):
        raise SystemExit("pass two rows (RUN:ROW RUN:ROW) or one run with --minus BASE, not both or neither")
    if args.minus is not None:
        if args.docs:
            raise SystemExit("--docs is not taken with --minus: every row is paired on all of the run's questions")
        report = every_row_minus(args.a, args.minus, args.task, args.n_boot, args.seed)
        if args.out:
            write_text(Path(args.out), json.dumps(report, indent=1) + "\n")
        return report
    task, a = outcomes(args.a, args.task)
    _, b = outcomes(args.b, task)
    ids = sorted(set(a) & set(b))
    if args.docs:
        start, end = docs_range(args.docs)
        ids = [i for i in ids if start <= i[1] < end]
    if not ids:
        raise SystemExit(f"no question is in both rows{' within --docs ' + args.docs if args.docs else ''}")
    rng = np.random.default_rng(args.seed)
    first, second = (np.array([rows[i] for i in ids], dtype=float) for rows in (a, b))
    report = {"task": task, "n": len(ids), "a": args.a, "b": args.b, "docs": args.docs,
              "acc_a": float(first.mean()), "interval_a": bootstrap_interval(first, args.n_boot, rng),
              "acc_b": float(second.mean()), "interval_b": bootstrap_interval(second, args.n_boot, rng),
              "paired": paired_bootstrap(first, second, args.n_boot, rng)}
    paired = report["paired"]
    print(f"{task}, n = {len(ids)}{' (doc_ids ' + args.docs + ')' if args.docs else ''}: "
          f"{report['acc_a']:.3f} − {report['acc_b']:.3f} = {paired['diff']:+.3f} "
          f"[{paired['low']:+.3f}, {paired['high']:+.3f}], P(not better) = {paired['p_not_better']:.3f}")
    return report


if __name__ == "__main__":
    main()
