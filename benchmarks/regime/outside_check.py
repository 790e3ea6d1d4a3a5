#!/usr/bin/env python
"""Outside check: the authors' public LoVer code, run unchanged on our exported features, against our own run.

Their `method.py` (github.com/wangxinyufighting/llm-lover) keeps no per-question record except its log: per test
question, one `answer: A\tbest_score: S\t...` line per branch, then two `ALL:count, ..., best_mdoel_acc_{sum,max}:ACC,
gt_answer:G, best_model_answer:P` lines. This reads that log (one layer), the folder `export_authors_layout.py`
wrote, and one arm of `regime_arms.py`'s report, and puts both runs side by side on the same questions: LoVer
sum / max accuracy, mean per-question AUROC (as `diagnostics.diagnose`), paired bootstrap of ours - theirs (sum)
and theirs - majority. `agrees`: the ours - theirs interval covers 0 and |ΔAUROC| <= 0.03. Example:

    .venv/bin/python -m benchmarks.regime.outside_check --authors-log /tmp/llm-lover/log/log_file_X/log_X.log \
      --export /tmp/lover-authors-input --ours benchmarks/results/regime_qwen2.5-coder-0.5b-instruct/arms.json \
      --ours-row "layer 12 | A': regime=authors + select dev:66 [dev66]" --label "0.5B layer 12" --out /tmp/check.json
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

import numpy as np

from lover_lmeval.core.select.answers import normalise_number
from lover_lmeval.core.stats import auroc, paired_bootstrap

ANSWER = re.compile(r"answer: (.*?)\tbest_score: (-?[0-9.]+)\t")
ALL = re.compile(r"ALL:(\d+), final_model_acc_(sum|max):[-0-9.]+, best_mdoel_acc_\2:([0-9.]+), "
                 r"gt_answer:(.*), best_model_answer:(.*)$")
THEIR_GT = re.compile(r"#### (\-?[0-9\.\,]+)")  # their GSMTask.GT_ANS_RE


def their_gold(solution: str) -> str:
    """Their `extract_gt_answer`: the number after '#### ', commas removed ('[invalid]' without one)."""
    m = THEIR_GT.search(solution)
    return m.group(1).strip().replace(",", "") if m else "[invalid]"


def our_gold(solution: str) -> str:
    """Our target, as data/tasks.py's `_gsm8k_doc` builds it (copied: importing it loads the datasets stack)."""
    gold = solution.split("####")[-1].strip()
    return normalise_number(gold) or gold


def parse_log(path: Path, n_branches: int) -> list[dict]:
    """Per question in their order: its branches [(answer, score)] and, per "sum"/"max", the ALL line's
    (count, accuracy %, gt_answer, pick). A question their loop skipped (`continue` on an exception) logged its
    branches but no ALL lines: it carries None there."""
    questions, pending, last = [], [], 0
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        parts = line.split(" - ", 3)  # asctime - level - module - message
        message = parts[3] if len(parts) == 4 else ""
        if m := ANSWER.match(message):
            pending.append((m[1], float(m[2])))
        elif m := ALL.match(message):
            count, kind, record = int(m[1]), m[2], (int(m[1]), float(m[3]), m[4], m[5])
            if kind == "sum":
                if count <= last:
                    raise SystemExit(f"{path}: ALL:{count} after ALL:{last}: more than one decode run in this log")
                if not pending or len(pending) % n_branches:
                    raise SystemExit(f"{path}: {len(pending)} branch lines before ALL:{count}, not k x {n_branches}")
                blocks = [pending[i:i + n_branches] for i in range(0, len(pending), n_branches)]
                questions += [{"branches": b, "sum": None, "max": None} for b in blocks[:-1]]  # skipped ones
                questions.append({"branches": blocks[-1], "sum": record, "max": None})
                pending, last = [], count
            elif count != last or questions[-1]["max"] is not None:
                raise SystemExit(f"{path}: ALL:{count} (max) does not follow its sum line")
            else:
                questions[-1]["max"] = record
    if len(pending) % n_branches:
        raise SystemExit(f"{path}: {len(pending)} trailing branch lines, not k x {n_branches}")
    return questions + [{"branches": pending[i:i + n_branches], "sum": None, "max": None}
                        for i in range(0, len(pending), n_branches)]


def their_correct(questions: list[dict], kind: str) -> np.ndarray:
    """(Q,) 0/1 by their own `task.correct`: the step of best_correct = round(acc * count / 100) from one ALL line
    to the next (acc is printed to 0.01%, so the count is exact up to 10^4 questions)."""
    totals = [round(q[kind][1] * q[kind][0] / 100) for q in questions]
    steps = np.diff([0] + totals).astype(float)
    if not np.isin(steps, (0.0, 1.0)).all():
        raise SystemExit(f"their {kind} running counts do not step by 0 or 1: {totals[:20]} ...")
    return steps


def per_question_auroc(scores: list[np.ndarray], labels: list[np.ndarray]) -> float | None:
    """`diagnose`'s auroc_per_question_mean, restated for plain arrays (diagnose reads LoverResults): the mean of
    stats.auroc over the questions with both right and wrong branches; the others are left out."""
    values = [a for s, c in zip(scores, labels) if (a := auroc(s, c)) is not None]
    return float(np.mean(values)) if values else None


def print_table(out: dict) -> None:
    fmt = lambda x: "n/a" if x is None else f"{x:.3f}"  # noqa: E731
    print(f"{out['label']} (n = {out['n']}; ours: {out['ours_row']})\n")
    print("| run | LoVer sum | LoVer max | AUROC/q |\n|---|---|---|---|")
    for name in ("theirs", "ours"):
        row = out[name]
        print(f"| {name} | {fmt(row['sum'])} | {fmt(row['max'])} | {fmt(row['auroc_per_question'])} |")
    for key in ("ours_sum_minus_theirs_sum", "theirs_sum_minus_majority"):
        b = out[key]
        print(f"\n{key}: {b['diff']:+.3f} [{b['low']:+.3f}, {b['high']:+.3f}]", end="")
    print(f"\n|ΔAUROC| {fmt(out['auroc_abs_diff'])}; agrees: {out['agrees']}; "
          f"their sum picks judged otherwise by our rule: {out['theirs']['sum_rule_disagreements']}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--authors-log", required=True, type=Path, help="their log of one run (one layer)")
    parser.add_argument("--export", required=True, type=Path, help="export_authors_layout.py's folder")
    parser.add_argument("--ours", required=True, type=Path, help="regime_arms.py's report")
    parser.add_argument("--ours-row", required=True, help='its arms key, e.g. "layer 12 | A\'12[dev66]"')
    parser.add_argument("--label", default="")
    parser.add_argument("--out", required=True, type=Path)
    args = parser.parse_args()
    model_answers = json.loads((args.export / "answers_model_test.json").read_text())
    solutions = json.loads((args.export / "answers_gt_test.json").read_text())
    report = json.loads(args.ours.read_text())
    ours = report["arms"][args.ours_row]
    if "not_run" in ours:
        raise SystemExit(f"--ours-row {args.ours_row!r} was not run in {args.ours}: {ours['not_run']}")
    n = len(ours["per_question_sum"])
    if len(model_answers) != n or len(solutions) != n:  # else their seeded test draw is not the identity
        raise SystemExit(f"export holds {len(model_answers)} questions, ours {n}: export exactly ours")
    branches = [model_answers[str(i)] for i in range(n)]
    questions = parse_log(args.authors_log, len(branches[0]))
    skipped = [i for i, q in enumerate(questions) if q["sum"] is None or q["max"] is None]
    if skipped or len(questions) != n:
        raise SystemExit(f"{args.authors_log}: {len(questions)} questions logged, {len(skipped)} without ALL lines "
                         f"(skipped by their `continue`: {skipped[:20]}); expected {n} answered")
    for i, q in enumerate(questions):  # the same questions in the same order, or nothing below means anything
        logged = [a for a, _ in q["branches"]]
        if logged != [str(a) for a in branches[i]] or q["sum"][2] != their_gold(solutions[str(i)]):
            raise SystemExit(f"question {i}: the log's branches or gt_answer differ from the export's")
    gold = [our_gold(solutions[str(i)]) for i in range(n)]
    # Branch labels as our gold_labels / answer_right: the exported answer (our extractor's normalised value, or
    # "[invalid]") equal to our normalised target.
    labels = [np.array([a == g for a, _ in q["branches"]]) for q, g in zip(questions, gold)]
    scores = [np.array([s for _, s in q["branches"]]) for q in questions]
    theirs = {kind: their_correct(questions, kind) for kind in ("sum", "max")}
    # Their picks judged by our rule too: a non-zero count means their is_equiv and our equality disagree.
    by_our_rule = np.array([float(q["sum"][3] == g) for q, g in zip(questions, gold)])
    ours_sum = np.array(list(ours["per_question_sum"]), dtype=float)  # '0'/'1' per question
    majority = np.array(list(report["baseline_per_question"]["majority"]), dtype=float)
    a_theirs, a_ours = per_question_auroc(scores, labels), ours["auroc_per_question"]
    delta = None if a_theirs is None or a_ours is None else abs(a_ours - a_theirs)
    ours_minus = paired_bootstrap(ours_sum, theirs["sum"], 10_000, np.random.default_rng(0))
    out = {"label": args.label, "ours_row": args.ours_row, "n": n,
           "theirs": {"sum": float(theirs["sum"].mean()), "max": float(theirs["max"].mean()),
                      "auroc_per_question": a_theirs, "picks_sum": [q["sum"][3] for q in questions],
                      "picks_max": [q["max"][3] for q in questions],
                      "sum_rule_disagreements": int((by_our_rule != theirs["sum"]).sum())},
           "ours": {"sum": float(ours_sum.mean()), "max": ours["lover_max"], "auroc_per_question": a_ours},
           "ours_sum_minus_theirs_sum": ours_minus,
           "theirs_sum_minus_majority": paired_bootstrap(theirs["sum"], majority, 10_000, np.random.default_rng(0)),
           "auroc_abs_diff": delta,
           "agrees": bool(ours_minus["low"] <= 0 <= ours_minus["high"] and delta is not None and delta <= 0.03)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print_table(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
