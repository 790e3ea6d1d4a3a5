"""One Markdown table from `fit_ablation.py --orient-by-vote --orient-by-confidence` outputs (runs 5-6:
benchmarks/runs/run05_orientation.md, run06_orientation_held_out.md).

    .venv/bin/python -m benchmarks.fit.summarize_orient \
        benchmarks/results/fit_orient_lover_bbh_navigate_test100.json ...

Per fit: the label-free fit's AUROC, each signal's Spearman rho and the AUROC after orienting by it, and LoVer(sum) of
the fit / vote-oriented / confidence-oriented verifier. A sign is "right" when rho > 0 exactly when AUROC > 0.5 (a
flip then raises the AUROC above 0.5, a kept fit already is). The footer tallies right signs and the mean LoVer(sum)
per column, with the paired difference of the confidence-oriented LoVer(sum) against the fit's own on each set.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

SPEC_NAMES = {"losses=nega+intra+inter": "paper", "losses=nega+intra+inter_raw;curriculum=0.2": "authors"}
SIGNALS = (("vote", "vote_correlation", "oriented"), ("confidence", "confidence_correlation", "oriented_confidence"))


def sign_right(row: dict, correlation_key: str) -> bool:
    return (row[correlation_key] > 0) == (row["auroc"] > 0.5)


def render(paths: list[Path]) -> str:
    lines = ["| data (n) | fit | layer | AUROC fit | ρ vote → AUROC | ρ confidence → AUROC | LoVer sum: fit / vote / confidence "
             "| confidence − fit [95%] | majority | CoT(sum) | greedy |", "|---" * 11 + "|"]
    right = {signal: 0 for signal, _, _ in SIGNALS}
    sums = {"fit": 0.0, "vote": 0.0, "confidence": 0.0, "majority": 0.0}
    fits = 0
    for path in paths:
        report = json.loads(path.read_text())
        args, n = report["args"], len(report["questions"])
        data = f"{args['task'].removeprefix('lover_').removeprefix('bbh_')} {args['split']}, {args['model']} ({n})"
        for row in report["rows"]:
            missing = [key for _, corr, oriented in SIGNALS for key in (corr, oriented) if key not in row]
            if missing:
                raise SystemExit(f"{path}: row {row['spec']!r} lacks {', '.join(missing)}; "
                                 "run fit_ablation.py with --orient-by-vote --orient-by-confidence")
            fits += 1
            turned = []
            for signal, corr, oriented in SIGNALS:
                right[signal] += sign_right(row, corr)
                turned.append(f"{row[corr]:+.2f} → {row[oriented]['auroc']:.2f}")
            paired = row["oriented_confidence"].get("lover_sum_minus_fit")
            paired_cell = (f"{paired['diff']:+.2f} [{paired['low']:+.2f}, {paired['high']:+.2f}]" if paired else "—")
            sums["fit"] += row["lover_sum"]
            sums["vote"] += row["oriented"]["lover_sum"]
            sums["confidence"] += row["oriented_confidence"]["lover_sum"]
            sums["majority"] += row["majority"]
            lines.append(f"| {data} | {SPEC_NAMES.get(row['spec'], row['spec'])} | {row['layer']} | "
                         f"{row['auroc']:.2f} | {turned[0]} | "
                         f"{turned[1]} | {row['lover_sum']:.2f} / {row['oriented']['lover_sum']:.2f} / "
                         f"{row['oriented_confidence']['lover_sum']:.2f} | {paired_cell} | {row['majority']:.2f} | "
                         f"{row['oriented_confidence']['cot_sum']:.2f} | {row['greedy']:.2f} |")
    means = " / ".join(f"{name} {total / fits:.3f}" for name, total in sums.items())
    lines += ["", f"{fits} fits. Signs right: vote {right['vote']}/{fits}, confidence {right['confidence']}/{fits}. "
                  f"Mean LoVer(sum) over the fits: {means}."]
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("reports", nargs="+", type=Path, help="fit_orient_*.json files written by fit_ablation.py")
    print(render(p.parse_args().reports))


if __name__ == "__main__":
    main()
