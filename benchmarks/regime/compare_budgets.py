#!/usr/bin/env python
"""Two `regime_arms.py` reports on the same questions at two token budgets -> every row's accuracy at each and the
paired difference (later minus earlier, bootstrap over questions), from their per-question strings (Regime item 6).

    .venv/bin/python -m benchmarks.regime.compare_budgets REPORT_256.json REPORT_512.json --out budgets.json
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

from lover_lmeval.core.files import write_text
from lover_lmeval.core.stats import paired_bootstrap


def per_question(report: dict) -> dict[str, np.ndarray]:
    """Row name -> 0/1 correctness per question, for the baselines and every arm's LoVer(sum)."""
    rows = {name: bits for name, bits in report["baseline_per_question"].items()}
    rows.update({f"{arm} (sum)": entry["per_question_sum"] for arm, entry in report["arms"].items()
                 if "not_run" not in entry})  # an arm that could not run (regime_arms: no probe selected)
    return {name: np.array([int(c) for c in bits], dtype=float) for name, bits in rows.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("before")
    parser.add_argument("after")
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    reports = [json.loads(Path(p).read_text()) for p in (args.before, args.after)]
    if reports[0]["args"]["test_docs"] != reports[1]["args"]["test_docs"]:
        raise SystemExit("the two reports are not on the same test documents")
    before, after = (per_question(r) for r in reports)
    table = {}
    for name in before.keys() & after.keys():
        table[name] = {"before": float(before[name].mean()), "after": float(after[name].mean()),
                       "after_minus_before": paired_bootstrap(after[name], before[name], 10_000,
                                                              np.random.default_rng(0))}
    for name in sorted(table):
        d = table[name]["after_minus_before"]
        print(f"{name:60s} {table[name]['before']:.3f} -> {table[name]['after']:.3f}  "
              f"{d['diff']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}]")
    if args.out:
        write_text(args.out, json.dumps({"before": args.before, "after": args.after, "rows": table}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
