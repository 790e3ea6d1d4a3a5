"""Run 19 B's leaderboard: every selector against majority voting, per set and model size, from selectors_run.py.

Reads every `results/selectors/<set>.json`, and writes `leaderboard.md` / `leaderboard.json` beside them and the
README's figure (`docs/leaderboard.png`): accuracy minus majority with its 95% paired bootstrap interval (10,000
resamples, seed 0), per selector and set. The recommendation per task family follows the rule fixed in run 19 B
(benchmarks/runs/run19_cut_branches_selectors.md) before any result: pool the family's 0.5B sets; the selector with
the highest pooled accuracy is recommended if its pooled interval against majority lies above 0, else majority voting.
Sets of other sizes are shown, not used to choose; a family with no 0.5B set yet gets no recommendation.

    python -m benchmarks.selectors.selectors_table
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from lover_lmeval.apps.leaderboard import ROWS
from lover_lmeval.core.decode.decoding import BRANCH_ZERO
from lover_lmeval.core.files import write_text
from lover_lmeval.core.stats import auroc
from lover_lmeval.core.verify.scoring import (CONSTANT_ANSWER_MIN_QUESTIONS, CONSTANT_ANSWER_SHARE, constant_answer,
                                              top_pick)

from benchmarks.bank_sets import BankSet
from benchmarks.bench_common import REPO, RESULTS
from benchmarks.selectors.leaderboard_figure import draw, draw_pooled
from benchmarks.selectors.lover_standing import (lover_standing, markdown_lines, probe_markdown_lines, probe_standing,
                                                 readme_lines)
from benchmarks.selectors.pooled import FAMILIES, interval, paired, pool, pooled_panels

SELECTION_SIZE = "0.5b"
ORACLE = "pass_at_n"
DERIVED = ("leaderboard.json", "sampled_vs_cot.json")  # files in the results folder that are not selectors_run reports


def set_rows(report: dict) -> dict:
    """Per strategy: accuracy, and the paired difference against majority and against cot_sum."""
    strategies = list(report["questions"][0]["correct"])
    outcome = {s: np.array([q["correct"][s] for q in report["questions"]], dtype=float) for s in strategies}
    rows = {}
    for s in strategies:
        rows[s] = {"acc": float(outcome[s].mean()), "n": len(outcome[s])}
        if s != ORACLE:
            rows[s]["minus_majority"] = paired(outcome[s], outcome["majority"])
            rows[s]["minus_cot_sum"] = paired(outcome[s], outcome["cot_sum"])
    return rows


def path_aurocs(report: dict) -> dict:
    """AUROC of each path score against the branch's stated answer being right, branches pooled over the set."""
    right = np.concatenate([q["branch_right"] for q in report["questions"]])
    out = {}
    for name in report["questions"][0]["path_scores"]:
        scores = np.concatenate([q["path_scores"][name] for q in report["questions"]]).astype(float)
        scores = np.where(np.isfinite(scores), scores, np.nanmin(np.where(np.isfinite(scores), scores, np.nan)) - 1)
        out[name] = auroc(scores, right)
    return out


def one_answer_shares(report: dict) -> dict | None:
    """"shares": per label-free selector, the share of the set's answered questions given its most common answer
    (scoring.top_pick; None if it answered none), and under "gold" the same share of the gold answers (what answering
    one way scores at best); "one_way": the selectors that the package's constant-answer rule calls one answer
    (scoring.constant_answer, as the test-time fit's warning and `lover compare` do). None for a report written
    before selectors_run.py kept the picks."""
    questions = report["questions"]
    if "picked" not in questions[0]:
        return None
    picks = {s: [q["picked"][s] for q in questions] for s in questions[0]["picked"]}
    picks["gold"] = [q["gold"] for q in questions]
    return {"shares": {s: None if (found := top_pick(p)) is None else found[1] for s, p in picks.items()},
            "one_way": [s for s, p in picks.items() if s != "gold" and constant_answer(p) is not None]}


def recommend(reports: dict[str, dict]) -> dict:
    """Per family, the pre-registered recommendation from the 0.5B sets present."""
    out = {}
    for family, stems in FAMILIES.items():
        family_sets = [f"{SELECTION_SIZE}/{stem}" for stem in stems]
        scored = [name for name in reports if name in family_sets]  # the reports' order: it fixes the pooling
        if not scored:
            out[family] = {"selector": None, "why": f"no {SELECTION_SIZE} set of this family has been scored yet"}
            continue
        # Run 31: a row measured on only some of the family's sets has no pooled accuracy over the family, so it is
        # no candidate there (the rule itself is run 19 B's); `not_on_every_set` names such rows.
        held = [set(reports[name]["questions"][0]["correct"]) for name in scored]
        strategies = [s for s in reports[scored[0]]["questions"][0]["correct"]
                      if s != ORACLE and all(s in h for h in held)]
        partial = sorted({s for h in held for s in h} - set(strategies) - {ORACLE})
        pooled = pool(reports, scored, strategies)
        best = max(strategies, key=lambda s: (pooled[s].mean(), s == "majority"))
        versus = paired(pooled[best], pooled["majority"])
        wins = best != "majority" and versus["low"] > 0
        shares = {name: one_answer_shares(reports[name]) for name in scored}
        # Added in session 26, after HotpotQA completed the yes/no family with its winner answering one way on every
        # set: the best selector that answers no set one way, beside the rule's (which it does not replace).
        one_way = {s for found in shares.values() if found for s in found["one_way"]}
        selecting = max((s for s in strategies if s != "majority" and s not in one_way),
                        key=lambda s: pooled[s].mean(), default=None)
        out[family] = {"selector": best if wins else "majority", "best_point_estimate": best,
                       "best_acc": float(pooled[best].mean()), "majority_acc": float(pooled["majority"].mean()),
                       "best_minus_majority": versus, "n": len(pooled[best]),
                       "sets": sorted(scored),
                       # The rule pools all of the family's sets: with some still unscored it is provisional.
                       "missing": [name for name in family_sets if name not in reports],
                       # Where the best selector answers (almost) one way, its gain is the gold answers' skew: on
                       # navigate (session 24) greedy, short3 and LoVer tied at +0.132 that way, not by selecting.
                       "one_answer": {name: {"share": found["shares"][best], "gold": found["shares"]["gold"]}
                                      for name, found in shares.items() if found and best in found["one_way"]},
                       "one_answer_unchecked": [name for name, found in shares.items() if found is None],
                       "not_on_every_set": partial,
                       "best_answering_no_set_one_way": None if selecting is None else {
                           "selector": selecting, "minus_majority": paired(pooled[selecting], pooled["majority"])}}
    return out


def _provisional(rec: dict) -> str:
    return f"; provisional: {', '.join(rec['missing'])} not scored yet" if rec["missing"] else ""


def _one_answer(rec: dict) -> str:
    """The sets where the best selector gives one answer to >= CONSTANT_ANSWER_SHARE of the answered questions, with
    the share of the gold answers' most common one beside it (the selector's habit, then the set's skew)."""
    flagged = [f"{name} {d['share']:.0%} (gold {d['gold']:.0%})" for name, d in rec["one_answer"].items()]
    text = f"; `{rec['best_point_estimate']}` answers one way on {', '.join(flagged)}" if flagged else ""
    unchecked = rec["one_answer_unchecked"]
    return text + (f"; not checked for one answer: {', '.join(unchecked)} (reports without picks)" if unchecked else "")


def _no_selection(rec: dict) -> str:
    """The reading when the family's winner answers one way on every one of its sets: its gain over majority is the
    sets' base rates against a vote below them; then the best selector that answers no set one way, beside it."""
    if rec["missing"] or set(rec["one_answer"]) != set(rec["sets"]):
        return "."
    text = ". It answers one way on every set of the family: its gain is the sets' base rates over a vote below them"
    other = rec["best_answering_no_set_one_way"]
    if other is None:
        return text + "."
    verdict = "above" if other["minus_majority"]["low"] > 0 else "not above"
    return (text + f"; the best selector answering no set one way is `{other['selector']}`, "
            f"{interval(other['minus_majority'])} vs majority ({verdict} it).")


def _versus(table: dict, baseline: str) -> list[str]:
    """One markdown table: per selector and set, accuracy minus `baseline`'s (the baseline's own row: accuracy)."""
    sets = list(table["sets"])
    lines = ["| selector | " + " | ".join(f"{n} (n = {table['sets'][n][baseline]['n']})" for n in sets) + " |",
             "|---|" + "---|" * len(sets),
             f"| {baseline} (accuracy) | " + " | ".join(f"{table['sets'][n][baseline]['acc']:.3f}" for n in sets) + " |"]
    for s in table["strategies"]:
        if s == baseline:
            continue
        cells = ["—" if s not in table["sets"][n] else f"{table['sets'][n][s]['acc']:.3f}" if s == ORACLE
                 else interval(table["sets"][n][s][f"minus_{baseline}"]) for n in sets]
        lines.append(f"| `{s}` | " + " | ".join(cells) + " |")
    return lines


def _not_greedy(table: dict) -> list[str]:
    """The sets whose branches are not CoT-decoding's, where `greedy` (branch 0) is no greedy decode."""
    lines = [f"On {name} (decoding={mode}) `greedy` is branch 0, {BRANCH_ZERO[mode]}, not a greedy decode."
             for name, mode in table["decoding"].items() if mode != "cot"]
    return lines + [""] if lines else []


def markdown(table: dict, recommendation: dict) -> str:
    lines = ["Accuracy minus majority voting, 95% paired bootstrap interval (10,000 resamples, seed 0); `pass_at_n`: "
             "the oracle's accuracy (an upper bound: it reads the gold answer).", "", *_versus(table, "majority"), "",
             *_not_greedy(table), "Accuracy minus CoT-decoding's summed confidence (`cot_sum`), the same intervals:", "",
             *_versus(table, "cot_sum"), "", "| family | recommended | evidence |", "|---|---|---|"]
    for family, rec in recommendation.items():
        if rec["selector"] is None:
            lines.append(f"| {family} | — | {rec['why']} |")
            continue
        evidence = (f"best pooled: `{rec['best_point_estimate']}` {rec['best_acc']:.3f} vs majority "
                    f"{rec['majority_acc']:.3f}, {interval(rec['best_minus_majority'])}, n = {rec['n']} "
                    f"({', '.join(rec['sets'])}){_provisional(rec)}{_one_answer(rec)}{_no_selection(rec)}")
        lines.append(f"| {family} | `{rec['selector']}` | {evidence} |")
    lines += ["", *markdown_lines(table["lover_standing"])]
    probes = probe_markdown_lines(table["probe_standing"])
    lines += ["", *probes] if probes else []
    sets = list(table["auroc"])
    scores = list(dict.fromkeys(name for n in sets for name in table["auroc"][n]))  # a set's own, first seen first
    lines += ["", "AUROC of each path score against the branch's stated answer being right (branches pooled over the "
              "set; 0.5 is chance, below it the score ranks wrong branches first):", "",
              "| path score | " + " | ".join(sets) + " |", "|---|" + "---|" * len(sets)]
    for name in scores:
        cells = [f"{table['auroc'][n][name]:.3f}" if table["auroc"][n].get(name) is not None else "—" for n in sets]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    checked = [n for n in table["one_answer"] if table["one_answer"][n]]
    if checked:
        lines += ["", "Share of a set's answered questions given each selector's most common answer (`gold`: the "
                  f"gold answers'; **bold**: one answer, {CONSTANT_ANSWER_SHARE:.0%} or more of at least "
                  f"{CONSTANT_ANSWER_MIN_QUESTIONS} answered questions, where a gain over majority can be that answer "
                  "meeting a skewed set, not selection):", "",
                  "| selector | " + " | ".join(checked) + " |", "|---|" + "---|" * len(checked)]
        for s in [*[s for s in table["strategies"] if s != ORACLE], "gold"]:
            shares = [table["one_answer"][n]["shares"].get(s) for n in checked]
            flagged = [s in table["one_answer"][n]["one_way"] for n in checked]
            cells = ["—" if v is None else f"**{v:.2f}**" if bold else f"{v:.2f}" for v, bold in zip(shares, flagged)]
            lines.append(f"| `{s}` | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


BEGIN, END = "<!-- leaderboard: generated by benchmarks/selectors/selectors_table.py -->", "<!-- leaderboard: end -->"


def readme_block(table: dict, recommendation: dict) -> str:
    """The README's words under the figure: the recommendation per family, with what qualifies it. Per-set numbers
    are the figure's and benchmarks/results/selectors/leaderboard.md's: a README table would grow a row a set."""
    lines = [BEGIN, "", "**Recommended label-free selector** (the rule fixed before the results, "
             "[run 19 B](benchmarks/runs/run19_cut_branches_selectors.md)):"]
    for family, rec in recommendation.items():
        if rec["selector"] is None:
            lines.append(f"- {family}: not yet measured ({rec['why']}).")
        else:
            lines.append(f"- {family}: `{rec['selector']}` (best pooled `{rec['best_point_estimate']}`, "
                         f"{interval(rec['best_minus_majority'])} vs majority, n = {rec['n']}"
                         f"{_provisional(rec)}{_one_answer(rec)}){_no_selection(rec)}")
    if any(rec.get("one_answer") for rec in recommendation.values()):
        lines += ["", f"*Answers one way*: the selector gave one answer to that share (≥ {CONSTANT_ANSWER_SHARE:.0%} "
                  f"of at least {CONSTANT_ANSWER_MIN_QUESTIONS}) of the set's answered questions; in brackets, the "
                  "share of the set's most common gold answer, what one answer scores at best. Its gain over majority "
                  "there can be the set's skew, not selection."]
    lines += ["", *readme_lines(table["lover_standing"])]
    lines += ["", "Every selector on every set, with intervals: "
              "[benchmarks/results/selectors/leaderboard.md](benchmarks/results/selectors/leaderboard.md).", END]
    return "\n".join(lines)


def update_readme(readme: Path, block: str) -> None:
    text = readme.read_text()
    if BEGIN not in text or END not in text:
        raise SystemExit(f"{readme} has no {BEGIN} ... {END} markers: put them where the leaderboard goes")
    write_text(readme, text[: text.index(BEGIN)] + block + text[text.index(END) + len(END):])


def build(folder: Path) -> tuple[dict, dict]:
    """(table, recommendation) from every selectors_run.py report in `folder`."""
    loaded = [json.loads(p.read_text()) for p in sorted(folder.glob("*.json")) if p.name not in DERIVED]
    reports = {report["set"]: report for report in loaded}
    if not reports:
        raise SystemExit(f"no selectors_run.py reports in {folder}: run benchmarks/selectors/selectors_run.py "
                         "--set NAME first")
    order = sorted(reports, key=lambda n: ({"135m": 0, "0.5b": 1, "1.5b": 2}.get(n.split("/")[0], 3), n))
    # Every row any report holds (run 31's rows are on some sets only: a set without one shows "—")
    present = list(dict.fromkeys(s for n in order for s in reports[n]["questions"][0]["correct"]))
    one_answer = {n: one_answer_shares(reports[n]) for n in order}
    table = {"strategies": [s for s in ROWS if s in present] + [s for s in present if s not in ROWS],  # YAML order
             "sets": {n: set_rows(reports[n]) for n in order},
             "auroc": {n: path_aurocs(reports[n]) for n in order},
             "one_answer": one_answer,
             # Reports written before BankSet had `decoding` are CoT-decoding's branches, its default.
             "decoding": {n: reports[n]["bank_set"].get("decoding", BankSet.decoding) for n in order},
             "lover_standing": lover_standing({n: reports[n] for n in order}, one_answer),
             "pooled": pooled_panels({n: reports[n] for n in order}),
             "probe_standing": probe_standing({n: reports[n] for n in order})}
    return table, recommend(reports)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", default=str(RESULTS / "selectors"))
    parser.add_argument("--figure", default=str(REPO / "docs/leaderboard.png"))
    parser.add_argument("--pooled-figure", default=str(REPO / "docs/leaderboard_pooled.png"))
    args = parser.parse_args()
    folder = Path(args.results)
    table, recommendation = build(folder)
    write_text(folder / "leaderboard.json", json.dumps({**table, "recommendation": recommendation}, indent=1))
    write_text(folder / "leaderboard.md", markdown(table, recommendation))
    rows = [s for s in table["strategies"] if s not in ("majority", ORACLE)]
    draw(table, rows, Path(args.figure))
    draw_pooled(table["pooled"], rows, Path(args.pooled_figure))
    update_readme(REPO / "README.md", readme_block(table, recommendation))
    print(markdown(table, recommendation))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
