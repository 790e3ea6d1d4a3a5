"""The README's leaderboard is generated from the committed selector results, so it cannot drift from them."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_readme_leaderboard_is_what_the_committed_results_give():
    sys.path.insert(0, str(REPO))
    try:
        from benchmarks.selectors import selectors_table
    finally:
        sys.path.remove(str(REPO))
    table, recommendation = selectors_table.build(REPO / "benchmarks" / "results" / "selectors")
    readme = (REPO / "README.md").read_text()
    assert selectors_table.readme_block(table, recommendation) in readme, \
        "README's leaderboard differs from the results: run `python benchmarks/selectors/selectors_table.py`"
    assert (REPO / "docs" / "leaderboard.png").is_file()
