#!/usr/bin/env python
"""The scaling benchmark's slopes before and after the changes that made its costs linear: today's
`bench_scaling.py` stages run against an older package and the current one, back to back in one quiet period, and a
table of both (stage, axis, sizes, seconds before / after at each size, slope before / after).

`--measure` checks out both commits as git worktrees under a temporary folder (the repository's own tree is left
alone), copies this checkout's benchmark files beside each one's `lover_lmeval` and runs

    PYTHONPATH=<that folder> python -m benchmarks.performance.bench_scaling --only ONLY --question-fits ... --out ...

for the older commit, then the newer; `--render` (the default) writes the table from the two outputs:

    .venv/bin/python -m benchmarks.performance.scaling_before_after --measure [--before 56cace1] [--after HEAD]
    .venv/bin/python -m benchmarks.performance.scaling_before_after --before-json A.json --after-json B.json

Only the stages whose code changed between the two (the cut, the bank, the fits, the intervals) run by default: the
others (token statistics, the features pass, the selectors) time the same code twice. Writes
benchmarks/results/scaling_before_after.json and .md.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.bench_common import REPO, RESULTS

ONLY = "^(cut_branch|bank_|fit_|interval_)"
#: The questions axis' fits stop at 4,000 (10,000 questions of PCA features hold ~5 GB; the older CCS would take
#: minutes a point long before).
QUESTION_FITS = "100,200,400,1000,2000,4000"
#: Today's benchmark files, copied beside each commit's package.
BENCH_FILES = ["benchmarks/__init__.py", "benchmarks/bench_common.py", "benchmarks/performance/bench_scaling.py",
               "benchmarks/performance/scaling_stages.py"]


def _git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True, check=True).stdout.strip()


def measure(before: str, after: str, folder: Path, only: str, question_fits: str) -> tuple[Path, Path]:
    """bench_scaling's `only` stages against `before`'s package, then `after`'s: their two JSON outputs."""
    outputs = []
    for label, commit in (("before", before), ("after", after)):
        tree, bench = folder / f"tree_{label}", folder / f"bench_{label}"
        _git("worktree", "add", "--detach", str(tree), commit)
        try:
            for name in BENCH_FILES:
                (bench / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(REPO / name, bench / name)
            shutil.copytree(tree / "lover_lmeval", bench / "lover_lmeval")
        finally:
            _git("worktree", "remove", "--force", str(tree))
        out = folder / f"scaling_{label}.json"
        command = [sys.executable, "-m", "benchmarks.performance.bench_scaling", "--only", only, "--question-fits",
                   question_fits, "--figure", "", "--out", str(out)]
        subprocess.run(command, cwd=bench, env={**os.environ, "PYTHONPATH": str(bench)}, check=True)
        outputs.append(out)
    return outputs[0], outputs[1]


def _size(n: int) -> str:
    return f"{n // 1024}k" if n >= 1024 and n % 1024 == 0 and n > 4096 else f"{n:,}"


def _seconds(stage: dict | None, sizes: list[int]) -> str:
    if stage is None:
        return "not run"
    at = {p["size"]: p["seconds"] for p in stage["points"]}
    return ", ".join(f"{at[n]:.3g}" if n in at else "-" for n in sizes)


def _slope(stage: dict | None) -> str:
    if stage is None or stage["slope"] is None:
        return "-"
    top = "" if stage["slope_top"] is None else f" (top-3 {stage['slope_top']:.2f})"
    return f"{stage['slope']:.2f}{top}"


def _peaks(a: dict | None, b: dict | None) -> str:
    """Peak MB of each run at the largest size both measured ('-' where none)."""
    if a is None or b is None:
        return "-"
    common = {p["size"] for p in a["points"]} & {p["size"] for p in b["points"]}
    if not common:
        return "-"
    size = max(common)
    peak = [next(p["peak_mb"] for p in s["points"] if p["size"] == size) for s in (a, b)]
    return f"{_size(size)}: " + " → ".join("-" if x is None else f"{x:g}" for x in peak)


def table(before: dict, after: dict) -> list[dict]:
    """One row per (stage, axis) either run: the union of their sizes, each's seconds and slopes."""
    old = {(s["name"], s["axis"]): s for s in before["stages"]}
    new = {(s["name"], s["axis"]): s for s in after["stages"]}
    rows = []
    for key in list(new) + [k for k in old if k not in new]:
        a, b = old.get(key), new.get(key)
        sizes = sorted({p["size"] for s in (a, b) if s for p in s["points"]})
        rows.append({"stage": key[0], "axis": key[1], "sizes": sizes,
                     "before": None if a is None else {"seconds": [p["seconds"] for p in a["points"]],
                                                       "sizes": [p["size"] for p in a["points"]],
                                                       "slope": a["slope"], "slope_top": a["slope_top"],
                                                       "skipped": a["skipped"], "skip_reason": a["skip_reason"]},
                     "after": None if b is None else {"seconds": [p["seconds"] for p in b["points"]],
                                                      "sizes": [p["size"] for p in b["points"]],
                                                      "slope": b["slope"], "slope_top": b["slope_top"],
                                                      "skipped": b["skipped"], "skip_reason": b["skip_reason"]},
                     "cells": (_seconds(a, sizes), _seconds(b, sizes), _slope(a), _slope(b), _peaks(a, b))})
    return rows


def markdown(report: dict) -> str:
    b, a = report["before"], report["after"]
    m = a["machine"]
    lines = [f"# The scaling benchmark before and after ({report['before_commit']} → {report['after_commit']})", "",
             f"Machine: {m['cpu']}, {m['cores']} cores, AVX-512 {'yes' if m['avx512'] else 'no'}; torch {m['torch']} "
             f"({m['torch_threads']} thread), Python {m['python']}. Both runs back to back, today's benchmark files "
             f"against each commit's `lover_lmeval`: before {b['date']} (load average {b['machine']['loadavg_start']} "
             f"→ {b['machine']['loadavg_end']}, {b['wall_seconds']:.0f} s), after {a['date']} (load average "
             f"{m['loadavg_start']} → {m['loadavg_end']}, {a['wall_seconds']:.0f} s). A shared 2-core machine: "
             "seconds are the fastest of up to 5 calls, upper bounds.", "",
             "Commands (each in a folder holding today's benchmark files and that commit's package):", "",
             f"    PYTHONPATH=<folder> {report['bench_command']}", "",
             f"Written by `{report['command']}`.", "",
             "| stage | axis | sizes | seconds before | seconds after | slope before | slope after | peak MB |",
             "|---|---|---|---|---|---|---|---|"]
    for row in report["rows"]:
        old, new, s_old, s_new, peak = row["cells"]
        lines.append(f"| {row['stage']} | {row['axis']} | {', '.join(map(_size, row['sizes']))} | {old} | {new} | "
                     f"{s_old} | {s_new} | {peak} |")
    lines += ["", "Slope: least squares of log seconds on log size over the measured sizes (top-3: the largest three "
              "only); '-' a size that run did not measure. Peak MB: the first call's rise of the resident set's "
              "high-water mark, before → after, at the largest size both measured.", "",
              "Sizes a run stopped before:", ""]
    for row in report["rows"]:
        for label in ("before", "after"):
            run = row[label]
            if run and run["skipped"]:
                skipped = ", ".join(map(_size, run["skipped"]))
                lines.append(f"- `{row['stage']}` ({row['axis']}), {label}: not {skipped} ({run['skip_reason']})")
    lines += ["", "## Notes", "", *report.get("notes", [])]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--measure", action="store_true", help="run both (minutes); else render from the JSONs")
    parser.add_argument("--before", default="56cace1", help="the older commit (--measure)")
    parser.add_argument("--after", default="HEAD", help="the newer commit (--measure)")
    parser.add_argument("--only", default=ONLY, help="bench_scaling's --only (--measure)")
    parser.add_argument("--question-fits", default=QUESTION_FITS, help="bench_scaling's --question-fits (--measure)")
    parser.add_argument("--before-json", help="bench_scaling's output for the older package")
    parser.add_argument("--after-json", help="bench_scaling's output for the newer package")
    parser.add_argument("--notes", default=None, help="a text file whose lines go under Notes")
    parser.add_argument("--out", default=str(RESULTS / "scaling_before_after.json"), help="JSON path (.md beside)")
    args = parser.parse_args(argv)
    before_commit, after_commit = (_git("rev-parse", "--short", c) for c in (args.before, args.after))
    if args.measure:
        folder = Path(tempfile.mkdtemp(prefix="scaling_before_after_"))
        args.before_json, args.after_json = measure(before_commit, after_commit, folder, args.only,
                                                    args.question_fits)
    before, after = (json.loads(Path(p).read_text()) for p in (args.before_json, args.after_json))
    report = {"before_commit": before_commit, "after_commit": after_commit,
              "command": " ".join(["python", "-m", "benchmarks.performance.scaling_before_after",
                                   *(argv if argv is not None else sys.argv[1:])]),
              "before": {k: before[k] for k in ("date", "command", "machine", "wall_seconds", "sizes")},
              "after": {k: after[k] for k in ("date", "command", "machine", "wall_seconds", "sizes")},
              "bench_command": shlex.join(["python", "-m", "benchmarks.performance.bench_scaling", "--only", args.only,
                                           "--question-fits", args.question_fits, "--figure", "", "--out", "OUT"]),
              "rows": table(before, after),
              "notes": Path(args.notes).read_text().splitlines() if args.notes else []}
    report["markdown"] = markdown(report)
    out = Path(args.out)
    out.write_text(json.dumps(report, indent=1) + "\n")
    out.with_suffix(".md").write_text(report["markdown"] + "\n")
    print(report["markdown"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
