"""Where the test suite's time goes: a pytest JUnit XML file (`pytest --junitxml=FILE`) summarised per file and per
test, optionally against an earlier one, as a markdown table for `benchmarks/results/`.

    .venv/bin/python -m pytest -q --durations=60 --junitxml=/tmp/after.xml
    .venv/bin/python -m benchmarks.performance.suite_durations /tmp/after.xml --before /tmp/before.xml \
        --machine "AMD EPYC, AVX-512, 2 cores" > benchmarks/results/suite_durations.md

A test's time is its call plus its share of fixtures (JUnit's `time`); with pytest-xdist the per-test times add up to
more than the wall time (two workers), so the wall time comes from the run's own summary line (`--wall`).
"""

from __future__ import annotations

import argparse
import xml.etree.ElementTree as ElementTree
from collections import defaultdict
from dataclasses import dataclass


@dataclass(frozen=True)
class Case:
    file: str
    name: str
    seconds: float
    outcome: str
    """passed, failed, error or skipped."""


def read_cases(path: str) -> list[Case]:
    """Every test case of a JUnit XML file, its file taken from the class path (`tests.test_bank` -> test_bank.py)."""
    cases = []
    for case in ElementTree.parse(path).getroot().iter("testcase"):
        outcome = next((child.tag for child in case if child.tag in ("failure", "error", "skipped")), "passed")
        module = case.get("classname", "").split(".")
        file = next((part for part in module if part.startswith("test_")), module[-1]) + ".py"
        cases.append(Case(file, case.get("name", ""), float(case.get("time", 0.0)), outcome))
    return cases


def per_file(cases: list[Case]) -> dict[str, float]:
    seconds: dict[str, float] = defaultdict(float)
    for case in cases:
        seconds[case.file] += case.seconds
    return dict(seconds)


def counts(cases: list[Case]) -> str:
    tally: dict[str, int] = defaultdict(int)
    for case in cases:
        tally[case.outcome] += 1
    return ", ".join(f"{n} {outcome}" for outcome, n in sorted(tally.items()))


def minutes(seconds: float) -> str:
    return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"


def report(after: list[Case], before: list[Case] | None, top: int, machine: str, walls: tuple[str, str]) -> str:
    lines = [f"Machine: {machine}.", ""]
    for label, cases, wall in (("before", before, walls[0]), ("after", after, walls[1])):
        if cases is not None:
            lines.append(f"- {label}: {len(cases)} tests ({counts(cases)}), summed test time "
                         f"{minutes(sum(c.seconds for c in cases))}{f', wall {wall}' if wall else ''}")
    lines += ["", "## Per file", ""]
    files_after, files_before = per_file(after), per_file(before or [])
    header = "| file | before (s) | after (s) |" if before is not None else "| file | seconds |"
    lines += [header, "|---|---|---|" if before is not None else "|---|---|"]
    for file in sorted(set(files_after) | set(files_before), key=lambda f: -max(files_after.get(f, 0),
                                                                                 files_before.get(f, 0))):
        if before is not None:
            lines.append(f"| {file} | {files_before.get(file, 0):.1f} | {files_after.get(file, 0):.1f} |")
        else:
            lines.append(f"| {file} | {files_after.get(file, 0):.1f} |")
    for label, cases in (("before", before), ("after", after)):
        if cases is None:
            continue
        lines += ["", f"## The {top} slowest tests, {label}", "", "| seconds | test |", "|---|---|"]
        for case in sorted(cases, key=lambda c: -c.seconds)[:top]:
            lines.append(f"| {case.seconds:.1f} | {case.file}::{case.name} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("after", help="the JUnit XML file of the run to report")
    parser.add_argument("--before", help="an earlier run's JUnit XML file, side by side")
    parser.add_argument("--top", type=int, default=60, help="how many of the slowest tests to list")
    parser.add_argument("--machine", required=True, help="the CPU and cores the runs had, for the header")
    parser.add_argument("--wall", nargs=2, default=("", ""), metavar=("BEFORE", "AFTER"),
                        help="each run's wall time, from its summary line")
    args = parser.parse_args(argv)
    print(report(read_cases(args.after), read_cases(args.before) if args.before else None, args.top, args.machine,
                 tuple(args.wall)), end="")


if __name__ == "__main__":
    main()
