"""LoVer beside the other selectors: where another label-free selector beats it (issue Selectors, item 5: "LoVer keeps
its rows; where another selector beats it, the README says so").

Per model size and task family, the size's sets of that family are pooled (as run 19 B's rule pools the 0.5B ones);
for each LoVer row, its accuracy minus majority, and every other selector (majority voting included) whose 95% paired
bootstrap interval against that row (10,000 resamples, seed 0) lies above 0, which here is what "beats it" means:
one interval per selector, with no correction for the dozen compared. Only a description: it chooses nothing, and
an oracle (`pass_at_n`, which reads the gold answer) is never among the selectors compared. Written in session 29,
after every set was scored.
"""

from __future__ import annotations

from benchmarks.selectors.pooled import family_groups, interval, paired, pool

LOVER_ROWS = ("lover_max", "lover_sum")
MAJORITY = "majority"


def lover_standing(reports: dict[str, dict], one_answer: dict[str, dict | None] | None = None) -> list[dict]:
    """One entry per (size, family, LoVer row) present: the sets pooled, n, the row's difference from majority,
    `beaten_by`, the selectors above it ({"selector", "minus_lover"}, largest difference first), and `one_way_on`, the
    sets whose `one_answer[set]` (selectors_table.one_answer_shares; None: not checked) lists the row as answering one
    way. Only selectors every set of the family holds are compared. Sizes and sets come in the reports' order (it
    fixes the pooling, as in the recommendation); sets in no family (the sampled bank) are left out."""
    out = []
    for size, family, names, strategies in family_groups(reports):
        if MAJORITY not in strategies:
            raise SystemExit(f"{', '.join(names)}: no `{MAJORITY}` row in every report; rerun "
                             "benchmarks/selectors/selectors_run.py on these sets")
        pooled = pool(reports, names, strategies)
        for row in (r for r in LOVER_ROWS if r in pooled):
            above = [(s, paired(pooled[s], pooled[row])) for s in strategies if s not in LOVER_ROWS]
            out.append({"size": size, "family": family, "row": row, "sets": names, "n": len(pooled[row]),
                        "minus_majority": paired(pooled[row], pooled[MAJORITY]),
                        "beaten_by": [{"selector": s, "minus_lover": d}
                                      for s, d in sorted(above, key=lambda sd: -sd[1]["diff"]) if d["low"] > 0],
                        "one_way_on": [name for name in names
                                       if row in ((one_answer or {}).get(name) or {}).get("one_way", ())]})
    return out


def _sets(entry: dict) -> str:
    return ", ".join(name.split("/", 1)[1] for name in entry["sets"])


def readme_lines(standing: list[dict]) -> list[str]:
    """One line per size and family: each LoVer row against majority, how many selectors beat it (saying when
    majority voting is one), the one that beats it by most, and the sets it answers one way on (the full lists are in
    leaderboard.md)."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for entry in standing:
        groups.setdefault((entry["size"], entry["family"]), []).append(entry)
    lines = ["**LoVer beside them** (a size's sets of a family pooled; a selector *beats* a LoVer row where its 95% "
             "paired interval against the row lies above 0, one interval per selector, uncorrected for the dozen "
             "compared):"]
    for (size, family), entries in groups.items():
        parts = []
        for e in entries:
            text = f"`{e['row']}` {interval(e['minus_majority'])} vs majority"
            beaten = e["beaten_by"]
            if beaten:
                majority_too = any(b["selector"] == MAJORITY for b in beaten)
                with_majority = " (majority voting among them)" if majority_too else ""
                text += (f", beaten by {len(beaten)} selector{'s' * (len(beaten) > 1)}{with_majority}, most by "
                         f"`{beaten[0]['selector']}` ({interval(beaten[0]['minus_lover'])})")
            else:
                text += ", beaten by none"
            if e["one_way_on"]:
                text += f", answering one way on {len(e['one_way_on'])} of its {len(e['sets'])} sets"
            parts.append(text)
        lines.append(f"- {size} {family} ({_sets(entries[0])}; n = {entries[0]['n']}): " + "; ".join(parts) + ".")
    return lines


def markdown_lines(standing: list[dict]) -> list[str]:
    """leaderboard.md's table: every LoVer row, size and family, with every selector that beats it."""
    lines = ["LoVer beside the others (a size's sets of a family pooled; *beaten by*: the selectors whose 95% paired "
             "interval against the LoVer row lies above 0, with that difference, uncorrected for the dozen compared; "
             "*one way on*: the sets the row answers one way on):", "",
             "| size | family | sets | n | LoVer row | − majority | beaten by | one way on |",
             "|---|---|---|---|---|---|---|---|"]
    for e in standing:
        beaten = ", ".join(f"`{b['selector']}` {interval(b['minus_lover'])}" for b in e["beaten_by"]) or "none"
        one_way = ", ".join(name.split("/", 1)[1] for name in e["one_way_on"]) or "—"
        lines.append(f"| {e['size']} | {e['family']} | {_sets(e)} | {e['n']} | `{e['row']}` | "
                     f"{interval(e['minus_majority'])} | {beaten} | {one_way} |")
    return lines


#: LoVer's rows against the plain probes it extends, fitted on the same features (run 31): does the constraint help?
PROBE_PAIRS = (("lover_max", "ccs_max"), ("lover_sum", "ccs_sum"), ("lover_max", "pca_max"), ("lover_sum", "pca_sum"))


def probe_standing(reports: dict[str, dict]) -> dict[str, dict]:
    """Per set whose report holds the probes' rows: each `PROBE_PAIRS` difference (LoVer minus the probe, paired, n),
    and the test-time fits' rank checks (Spearman with the vote share and CoT-decoding's confidence; `reversed`: the
    fits the warning named), as selectors_run.py recorded them."""
    out = {}
    for name, report in reports.items():
        held = report["questions"][0]["correct"]
        if not all(a in held and b in held for a, b in PROBE_PAIRS):
            continue
        pooled = pool(reports, [name], sorted({s for pair in PROBE_PAIRS for s in pair}))
        out[name] = {"n": len(report["questions"]),
                     "differences": {f"{a} − {b}": paired(pooled[a], pooled[b]) for a, b in PROBE_PAIRS},
                     "rank_checks": report.get("fit", {}).get("rank_checks")}
    return out


def probe_markdown_lines(standing: dict[str, dict]) -> list[str]:
    """leaderboard.md's table of LoVer against its plain probes, and each fit's rank checks."""
    if not standing:
        return []
    lines = ["LoVer against the plain probes it extends, fitted on the same features (paired; above 0: LoVer's "
             "constraints help) and each test-time fit's Spearman correlation with the vote share / CoT-decoding's "
             "confidence (**bold**: both below −0.3, the fits the run's warning named):", "",
             "| set (n) | " + " | ".join(f"{a} − {b}" for a, b in PROBE_PAIRS) + " | lover | ccs | pca |",
             "|---|" + "---|" * (len(PROBE_PAIRS) + 3)]
    for name, entry in standing.items():
        checks = entry["rank_checks"] or {}
        named = set(checks.get("reversed", ()))
        fits = []
        for fit in ("lover", "ccs", "pca"):
            found = checks.get(fit)
            text = "—" if found is None else f"{found['vote']:+.2f} / {found['confidence']:+.2f}"
            fits.append(f"**{text}**" if fit in named else text)
        lines.append(f"| {name} ({entry['n']}) | " + " | ".join(interval(d) for d in entry["differences"].values())
                     + " | " + " | ".join(fits) + " |")
    return lines
