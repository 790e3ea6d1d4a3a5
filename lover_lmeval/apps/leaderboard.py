"""`lover compare`'s leaderboard as markdown: the strategy rows (in core/select/rows.py's order) with their intervals,
the sampling references in a table of their own (they read the gold answer: never among the selectors), the paired
differences, the verifier diagnostics and the layer sweep, from the report `compare.compare` writes to
leaderboard.json."""

from __future__ import annotations

from ..core.select.rows import ROWS  # plain data: `lover compare --help` imports it without torch


def _cell(cell: dict | None) -> str:
    """One leaderboard cell: accuracy [95% interval] n, and the one-answer share where pick_shares flagged the row."""
    if not cell:
        return "–"
    text = f"{cell['acc']:.3f} [{cell['low']:.3f}, {cell['high']:.3f}] n={cell['n']}"
    return f"{text}, one answer {cell['top_pick_share']:.0%}" if cell.get("one_answer") else text


def render_markdown(report: dict) -> str:
    tasks = list(report["tasks"])
    lines = ["| strategy | " + " | ".join(tasks) + " |", "|---|" + "---|" * len(tasks)]
    extra = sorted({row for t in tasks for row in report["tasks"][t]["rows"]} - set(ROWS))
    for row in (*ROWS, *extra):
        cells = [_cell(report["tasks"][task]["rows"].get(row)) for task in tasks]
        lines.append(f"| {row} | " + " | ".join(cells) + " |")
    lines.append("| distinct answers / question | " + " | ".join(
        f"{report['tasks'][t]['distinct_answers']:.2f}" for t in tasks) + " |")
    if any(row.get("one_answer") for t in tasks for row in report["tasks"][t]["rows"].values()):
        rule = report["one_answer_rule"]
        lines += ["", f"*one answer N%*: the row gave one answer to N% (≥ {rule['share']:.0%}, of ≥ "
                  f"{rule['min_questions']} answered questions); a gain over majority there can be that answer's share "
                  "of the gold answers, not selection."]
    lines += render_references(report)
    lines += render_vs_majority(report)
    lines += ["", "Paired bootstrap (same questions), LoVer(sum) minus baseline:", ""]
    for task in tasks:
        for name, stats in report["tasks"][task]["paired"].items():
            lines.append(f"- {task}, lover_sum − {name}: {stats['diff']:+.3f} [{stats['low']:+.3f}, "
                         f"{stats['high']:+.3f}], P(not better) = {stats['p_not_better']:.3f}")
    return "\n".join(lines) + "\n"


def render_vs_majority(report: dict) -> list[str]:
    """Every row minus majority voting, paired (compare's `vs_majority`), rows in core/select/rows.py's order; [] for
    a report without them."""
    tasks = [t for t in report["tasks"] if report["tasks"][t].get("vs_majority")]
    if not tasks:
        return []
    found = list(dict.fromkeys(name for t in tasks for name in report["tasks"][t]["vs_majority"]))
    names = [row for row in ROWS if row in found] + [row for row in found if row not in ROWS]
    lines = ["", "Every row minus majority voting, paired on the same questions (95% bootstrap interval: above 0 the "
             "row beats the vote there, below 0 it loses, else no difference is shown):", "",
             "| row − majority | " + " | ".join(tasks) + " |", "|---|" + "---|" * len(tasks)]
    for name in names:
        cells = [report["tasks"][t]["vs_majority"].get(name) for t in tasks]
        lines.append(f"| {name} | " + " | ".join("–" if c is None else f"{c['diff']:+.3f} [{c['low']:+.3f}, "
                                                 f"{c['high']:+.3f}]" for c in cells) + " |")
    return lines


def render_references(report: dict) -> list[str]:
    """The references' table (core/select/references.py), rows in the report's order; [] for a report without them."""
    tasks = [t for t in report["tasks"] if report["tasks"][t].get("references")]
    if not tasks:
        return []
    names = list(dict.fromkeys(name for t in tasks for name in report["tasks"][t]["references"]))
    lines = ["", "References: what the branches score by themselves, from the gold answer (not selectors): avg@N the "
             "mean branch accuracy, pass@k a k-subset holding a right branch (unbiased estimator), maj@k majority "
             "voting over a k-subset (expected over every k-subset, ties as majority breaks them):", "",
             "| reference | " + " | ".join(tasks) + " |", "|---|" + "---|" * len(tasks)]
    for name in names:
        lines.append(f"| {name} | " + " | ".join(_cell(report["tasks"][t]["references"].get(name)) for t in tasks)
                     + " |")
    return lines


def render_diagnostics(report: dict) -> str:
    keys = ("auroc_pooled", "auroc_per_question_mean", "mean_score_correct", "mean_score_incorrect", "ece",
            "branch_accuracy", "groups_per_question", "gold_among_answers", "gold_group_largest",
            "gold_group_top_scored", "top_pick_share")
    lines = ["| task | verifier | " + " | ".join(keys) + " |", "|---|---|" + "---|" * len(keys)]
    for task, entry in report["tasks"].items():
        for name, diag in entry.get("diagnostics", {}).items():
            cells = ["–" if diag[k] is None else f"{diag[k]:.3f}" for k in keys]
            lines.append(f"| {task} | {name} | " + " | ".join(cells) + " |")
    for task, entry in report["tasks"].items():
        if "layer_sweep" in entry:
            sweep = entry["layer_sweep"]
            lines += ["", f"Layer sweep on {task} (label-free refit per layer):", "",
                      "| layer | " + " | ".join(map(str, sweep["layers"])) + " |",
                      "|---|" + "---|" * len(sweep["layers"])]
            for key in ("lover_max", "lover_sum", "auroc_pooled"):
                lines.append(f"| {key} | " + " | ".join("–" if v is None else f"{v:.3f}" for v in sweep[key]) + " |")
    return "\n".join(lines) + "\n"
