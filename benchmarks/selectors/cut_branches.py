"""Run 19 A: should a branch cut at the token budget, with no final-answer marker, count as "no answer"?

For every committed evaluation set (bank_sets.SETS), each label-free selector is scored under today's rule (the
extractor's answer, its fallback included) and under rule R (a `length` branch whose answer came from the fallback has
none); greedy stays branch 0's extracted answer under both (benchmarks/runs/run19_cut_branches_selectors.md, A, says
why). No model runs.

    python -m benchmarks.selectors.cut_branches --out benchmarks/results/cut_branches.json
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import dataclass

import numpy as np

from lover_lmeval.core.select.answers import Answer, get_extractor, matches_gold
from lover_lmeval.core.files import atomic_path
from lover_lmeval.core.select.selection import STRATEGIES, Question
from lover_lmeval.core.stats import paired_bootstrap

from benchmarks.bank_sets import SETS, load_set

SELECTORS = ("greedy", "majority", "cot_max", "cot_sum")


@dataclass
class _Branches:
    """What a strategy reads of a result: its branches (margins, offsets)."""

    branches: list


def rule_r(answers: list[Answer | None], branches) -> list[Answer | None]:
    """Rule R: an unfinished branch (`finish_reason == "length"`) without a marked answer has no answer."""
    return [None if a is not None and b.finish_reason == "length" and not a.marked else a
            for a, b in zip(answers, branches)]


def gold_value(extract, gold: str) -> str:
    answer = extract(f"The answer is {gold}.")  # as the task loaders normalise targets
    return answer.value if answer is not None else gold.strip()


def score_set(name: str) -> dict:
    bank_set = SETS[name]
    extract = get_extractor(bank_set.extract)
    outcomes = {(rule, s): [] for rule in ("today", "R") for s in SELECTORS}
    affected = affected_right = branches = groups_changed = 0
    for q in load_set(bank_set):
        gold = gold_value(extract, q.gold)
        today = [extract(b.text) for b in q.branches]
        with_r = rule_r(today, q.branches)
        result = _Branches(q.branches)
        for rule, answers in (("today", today), ("R", with_r)):
            for strategy in SELECTORS:
                used = today if strategy == "greedy" else answers
                pick = STRATEGIES[strategy](Question(result, used, "lover", None))
                outcomes[rule, strategy].append(int(matches_gold(extract, pick, gold)))
        changed = [a is not None and b is None for a, b in zip(today, with_r)]
        affected += sum(changed)
        affected_right += sum(1 for a, c in zip(today, changed) if c and matches_gold(extract, a.value, gold))
        branches += len(today)
        groups_changed += any(changed)
    rng = np.random.default_rng(0)
    n = len(outcomes["today", "greedy"])
    rows = {}
    for strategy in SELECTORS:
        a, b = np.array(outcomes["R", strategy]), np.array(outcomes["today", strategy])
        rows[strategy] = {"today": float(b.mean()), "R": float(a.mean()), "R_minus_today": paired_bootstrap(a, b, 10_000, rng)}
    return {"set": name, "n": n, "branches": branches, "affected_branches": affected,
            "affected_fallback_right": affected_right, "questions_with_changed_groups": groups_changed, "rows": rows,
            "outcomes": {f"{rule}/{s}": v for (rule, s), v in outcomes.items()}}


def pooled(reports: list[dict]) -> dict:
    """Per selector, R − today over every question of these sets (paired bootstrap, seed 0)."""
    rng = np.random.default_rng(0)
    out = {}
    for strategy in SELECTORS:
        a = np.concatenate([r["outcomes"][f"R/{strategy}"] for r in reports])
        b = np.concatenate([r["outcomes"][f"today/{strategy}"] for r in reports])
        out[strategy] = {"n": len(a), "today": float(b.mean()), "R": float(a.mean()),
                         "R_minus_today": paired_bootstrap(a, b, 10_000, rng)}
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", nargs="*", default=list(SETS), help=f"set names (default all: {', '.join(SETS)})")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    unknown = [s for s in args.sets if s not in SETS]
    if unknown:
        raise SystemExit(f"unknown set(s) {unknown}; choose from {list(SETS)}")
    reports = []
    for name in args.sets:
        reports.append(score_set(name))
        r = reports[-1]
        print(f"{name}: n={r['n']} affected {r['affected_branches']}/{r['branches']} branches "
              f"({r['affected_fallback_right']} of them right), " + ", ".join(
                  f"{s} {v['today']:.3f}->{v['R']:.3f}" for s, v in r["rows"].items()), flush=True)
    sizes = sorted({name.split("/")[0] for name in args.sets})
    summary = {size: pooled([r for r in reports if r["set"].startswith(size + "/")]) for size in sizes}
    with atomic_path(args.out) as tmp:
        with open(tmp, "w") as handle:
            json.dump({"command": " ".join(["python", *sys.argv]), "pooled": summary, "sets": reports}, handle,
                      indent=1)
    for size, rows in summary.items():
        print(size, {s: f"{v['R_minus_today']['diff']:+.4f} [{v['R_minus_today']['low']:+.4f}, "
                        f"{v['R_minus_today']['high']:+.4f}]" for s, v in rows.items()})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
