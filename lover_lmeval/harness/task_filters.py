"""The lover_* tasks' extractor bases, `task_configs/_lover_<extract>.yaml`, generated from the selection rows.

lm-eval's YAML cannot compute a `filter_list`, so each registered extractor's base is written out from
core/select/rows.py's `TASK_ROWS`: one `lover_select` filter per row, the files alike but for `extract`; an oracle
row also names the doc field that holds the gold answer. An extractor whose answers have no normal form (registered
with an equivalence: `math`) also sets the tasks' metric, `lover_match` with that extractor, since `exact_match`
would compare `0.5` with a target `\\frac{1}{2}` as text. `python -m lover_lmeval.harness.task_filters` rewrites
them; with `--check` it writes nothing and fails while one is out of date (as tests/test_task_filters.py does).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ..core.files import write_text
from ..core.select.answers import EXACT, EXTRACTORS, equivalence_of
from ..core.select.rows import TASK_ROWS
from ..core.select.selection import ORACLES
from .autoload import TASK_FOLDER

#: The doc field that holds the gold answer in every packaged task (`_lover_base.yaml`'s doc_to_target); oracle rows
#: read it.
GOLD_FIELD = "target"

HEADER = """\
# Generated from lover_lmeval/core/select/rows.py by `python -m lover_lmeval.harness.task_filters`: edit the rows
# there and rerun it, not this file (tests/test_task_filters.py fails while it is out of date).
# The one place that names the answer extractor for the tasks that include this file (`lover train` reads it from
# here too): one lover_select filter per selection row, one metric row each.
include: _lover_base.yaml
filter_list:
"""


def render(extract: str) -> str:
    """The text of `_lover_<extract>.yaml`."""
    lines = []
    for row in TASK_ROWS:
        lines += [f"  - name: {row}", "    filter:", "      - function: lover_select", f"        strategy: {row}",
                  f"        extract: {extract}"]
        if row in ORACLES:
            lines.append(f"        gold: {GOLD_FIELD}")
    if equivalence_of(EXTRACTORS[extract]) is not EXACT:
        lines += ["# No normal form: the pick is scored against the target by the extractor's equivalence.",
                  "metric_list:", "  - metric: lover_match", f"    extract: {extract}", "    aggregation: mean",
                  "    higher_is_better: true"]
    return HEADER + "\n".join(lines) + "\n"


def base_path(extract: str) -> Path:
    """Where the base of the tasks that extract `extract` lives (their YAMLs include it by this name)."""
    return TASK_FOLDER / f"_lover_{extract}.yaml"


def stale() -> list[str]:
    """The extractors whose base file is missing or not what `render` writes now."""
    return [extract for extract in EXTRACTORS
            if not base_path(extract).is_file() or base_path(extract).read_text(encoding="utf-8") != render(extract)]


def main(argv: list[str] | None = None) -> int:
    """Rewrite the out-of-date bases (or, with `--check`, name them); the exit status."""
    parser = argparse.ArgumentParser(prog="python -m lover_lmeval.harness.task_filters",
                                     description="Write task_configs/_lover_<extract>.yaml from core/select/rows.py.")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 naming the files out of date")
    args = parser.parse_args(argv)
    outdated = stale()
    if args.check:
        for extract in outdated:
            print(f"{base_path(extract)} is out of date: run python -m lover_lmeval.harness.task_filters")
        return 1 if outdated else 0
    for extract in outdated:
        write_text(base_path(extract), render(extract))
        print(f"wrote {base_path(extract)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
