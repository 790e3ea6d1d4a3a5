"""Run 31: the rows of Selectors II that need no model pass, added to run 19 B's committed selector reports.

For each report in benchmarks/results/selectors/ (selectors_run.py's), the set's banked questions are read again
(bank_sets.load_set: the tokenizer and the task's documents, no weights) and each branch's stated answer is re-read
with the set's extractor. Before anything is added, the report must agree with the bank: the same questions in the
same order, every branch's right/wrong, and majority's pick. Then:

- `rpc` from the report's per-branch mean log-probs (`path_scores.mean_logprob`, rounded to 1e-5) and the banks'
  texts, through core/select/rpc.py's `rpc_scores` (the registered strategy's own functions);
- where the bank's branches carry per-token statistics (0.5B GSM8K sampled), every statistics row through the
  registered strategies themselves (`rpc`, `inv_entropy_full`, `softsc_min`; rpc then from the statistics, the
  number of questions whose pick differs from the rounded means' recorded), with their path scores for AUROC.

A set that selectors_run.py re-read with this code already holds the rows natively and is skipped. The report keeps
what it held; `added` names each row added and from what.

    LOVER_DATA_DIR=../shared/data HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 \\
        .venv/bin/python -m benchmarks.selectors.selectors2_rows [--set 0.5b/gsm8k ...]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from benchmarks.bank_sets import SETS, load_set
from benchmarks.bench_common import RESULTS
from lover_lmeval.core.files import write_text
from lover_lmeval.core.results import LoverResult
from lover_lmeval.core.select.answers import answer_members, get_extractor, matches_gold, stated_answer
from lover_lmeval.core.select.rpc import rpc_scores
from lover_lmeval.core.select.selection import majority, pick_scored, select, Question
from lover_lmeval.core.select.selectors import span_lowest_probability

#: The rows a bank's own per-token statistics give (no model pass), in core/select/rows.py's order.
STATISTICS_ROWS = ("rpc", "inv_entropy_full", "softsc_min")
DERIVED = ("leaderboard.json", "sampled_vs_cot.json")  # files of the folder that are not selectors_run reports


def check_against_bank(report: dict, questions, extract) -> list[list]:
    """Each question's stated answers (Answer or None per branch), after checking the report against the bank;
    SystemExit naming the first disagreement."""
    if len(questions) != len(report["questions"]):
        raise SystemExit(f"{report['set']}: {len(questions)} banked questions, the report has {len(report['questions'])}")
    out = []
    for k, (q, row) in enumerate(zip(questions, report["questions"])):
        if (q.task, q.doc_index) != (row["task"], row["doc"]):
            raise SystemExit(f"{report['set']} question {k}: bank {(q.task, q.doc_index)} vs report "
                             f"{(row['task'], row['doc'])}")
        answers = [stated_answer(extract, b) for b in q.branches]
        right = [int(a is not None and matches_gold(extract, a.value, row["gold"])) for a in answers]
        if right != row["branch_right"]:
            raise SystemExit(f"{report['set']} question {k}: branches right {right} vs the report's "
                             f"{row['branch_right']}")
        vote = majority(Question(None, answers, "lover", None))
        if vote != row["picked"]["majority"]:
            raise SystemExit(f"{report['set']} question {k}: majority {vote!r} vs the report's "
                             f"{row['picked']['majority']!r}")
        out.append(answers)
    return out


def rpc_from_report(row: dict, branches, answers) -> str:
    """RPC's pick from the report's rounded mean log-probs and the branches' texts."""
    members = answer_members([a.value if a is not None else None for a in answers])
    scores, _ = rpc_scores(np.array(row["path_scores"]["mean_logprob"], dtype=float), [b.text for b in branches],
                           members)
    return pick_scored(members, scores)


def statistics_path_scores(branches, answers) -> dict[str, list[float]]:
    """Per branch: minus the mean token entropy (higher = surer) and Soft-SC's lowest answer-token probability."""
    entropy = [-float(np.mean(b.stats["entropy"])) if b.token_ids else float("-inf") for b in branches]
    lowest = [span_lowest_probability(np.asarray(b.stats["logprob"]), b.offsets, a) for b, a in zip(branches, answers)]
    return {"minus_mean_entropy": [round(v, 5) for v in entropy], "softsc_min": [round(v, 5) for v in lowest]}


def augment(path: Path) -> str:
    report = json.loads(path.read_text())
    name = report["set"]
    if all(row in report["questions"][0]["correct"] for row in STATISTICS_ROWS):
        return f"{name}: holds the statistics rows already (selectors_run.py with this code): skipped"
    bank_set = SETS[name]
    began = time.perf_counter()
    questions = load_set(bank_set)
    extract = get_extractor(bank_set.extract)
    stated = check_against_bank(report, questions, extract)
    with_stats = all(b.stats is not None for q in questions for b in q.branches)
    added, differ = {}, 0
    for q, row, answers in zip(questions, report["questions"], stated):
        from_report = rpc_from_report(row, q.branches, answers)
        picks = {"rpc": from_report}
        if with_stats:
            result = LoverResult(q.branches)
            picks = {s: select(result, s, extract) for s in STATISTICS_ROWS}
            differ += picks["rpc"] != from_report
            row["path_scores"].update(statistics_path_scores(q.branches, answers))
        for s, pick in picks.items():
            row["correct"][s] = int(matches_gold(extract, pick, row["gold"]))
            row["picked"][s] = pick
    source = ("the bank's per-token statistics (the registered strategies)" if with_stats else
              "the report's mean log-probs (rounded to 1e-5) and the bank's texts")
    for s in STATISTICS_ROWS if with_stats else ("rpc",):
        added[s] = source
    report.setdefault("added", {}).update({s: {"from": src, "by": "benchmarks/selectors/selectors2_rows.py"}
                                           for s, src in added.items()})
    if with_stats:
        report["added"]["rpc"]["picks_differing_from_rounded_means"] = differ
    write_text(path, json.dumps(report, indent=None))
    return (f"{name}: added {', '.join(added)} from {source} ({len(questions)} questions, "
            f"{time.perf_counter() - began:.0f} s)" + (f"; rpc picks differing from the rounded means: {differ}"
                                                       if with_stats else ""))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", action="append", default=None, help="a set name (default: every report)")
    parser.add_argument("--results", default=str(RESULTS / "selectors"))
    args = parser.parse_args()
    folder = Path(args.results)
    paths = [p for p in sorted(folder.glob("*.json")) if p.name not in DERIVED]
    if args.set:
        wanted = {s.replace("/", "_") + ".json" for s in args.set}
        paths = [p for p in paths if p.name in wanted]
    for path in paths:
        print(augment(path), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
