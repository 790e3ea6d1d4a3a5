"""LoVer beside the other selectors: where another label-free selector beats it (issue Selectors, item 5: "LoVer keeps
its rows; where another selector beats it, the README says so").

Per model size and task family, the size's sets of that family are pooled (as run 19 B's rule pools the 0.5B ones);
for each LoVer row, its accuracy minus majority, and every other selector whose 95% paired bootstrap interval
against that row (10,000 resamples, seed 0) lies above 0, which here is what "beats it" means. Only a description:
it chooses nothing, and an oracle (`pass_at_n`, which reads the gold answer) is never among the selectors compared.
Written in session 29, after every set was scored; the rule it describes is the leaderboard's own interval.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from lover_lmeval.core.select.selection import ORACLES

LOVER_ROWS = ("lover_max", "lover_sum")


def lover_standing(reports: dict[str, dict], families: dict[str, tuple[str, ...]],
                   paired: Callable[[np.ndarray, np.ndarray], dict]) -> list[dict]:
    """One entry per (size, family, LoVer row) present: the sets pooled, n, the row's difference from majority, and
    `beaten_by`, the selectors above it ({"selector", "minus_lover"}, largest difference first). `paired(a, b)` is
    the leaderboard's a − b bootstrap. Sizes come in the reports' order; sets that belong to no family (the sampled
    bank) are left out."""
    out = []
    for size in dict.fromkeys(name.split("/")[0] for name in reports):
        for family, stems in families.items():
            names = [name for name in reports if name in {f"{size}/{stem}" for stem in stems}]
            if not names:
                continue
            strategies = [s for s in reports[names[0]]["questions"][0]["correct"] if s not in ORACLES]
            pooled = {s: np.concatenate([[q["correct"][s] for q in reports[name]["questions"]] for name in names])
                      .astype(float) for s in strategies}
            for row in (r for r in LOVER_ROWS if r in pooled):
                above = [(s, paired(pooled[s], pooled[row])) for s in strategies if s not in LOVER_ROWS]
                out.append({"size": size, "family": family, "row": row, "sets": sorted(names),
                            "n": len(pooled[row]), "minus_majority": paired(pooled[row], pooled["majority"]),
                            "beaten_by": [{"selector": s, "minus_lover": d}
                                          for s, d in sorted(above, key=lambda sd: -sd[1]["diff"]) if d["low"] > 0]})
    return out


def _interval(d: dict) -> str:
    return f"{d['diff']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}]"


def readme_lines(standing: list[dict]) -> list[str]:
    """One line per size and family: each LoVer row against majority, and the selector that beats it by most with
    how many do (the full lists are in leaderboard.md)."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for entry in standing:
        groups.setdefault((entry["size"], entry["family"]), []).append(entry)
    lines = ["**LoVer beside them** (a size's sets of a family pooled; a selector *beats* a LoVer row where its 95% "
             "paired interval against the row lies above 0):"]
    for (size, family), entries in groups.items():
        parts = []
        for e in entries:
            text = f"`{e['row']}` {_interval(e['minus_majority'])} vs majority"
            if e["beaten_by"]:
                top = e["beaten_by"][0]
                text += (f", beaten by {len(e['beaten_by'])} selector{'s' * (len(e['beaten_by']) > 1)}, most by "
                         f"`{top['selector']}` ({_interval(top['minus_lover'])})")
            else:
                text += ", beaten by none"
            parts.append(text)
        lines.append(f"- {size} {family} (n = {entries[0]['n']}): " + "; ".join(parts) + ".")
    return lines


def markdown_lines(standing: list[dict]) -> list[str]:
    """leaderboard.md's table: every LoVer row, size and family, with every selector that beats it."""
    lines = ["LoVer beside the others (a size's sets of a family pooled; *beaten by*: the selectors whose 95% paired "
             "interval against the LoVer row lies above 0, with that difference):", "",
             "| size | family | n | LoVer row | − majority | beaten by |", "|---|---|---|---|---|---|"]
    for e in standing:
        beaten = ", ".join(f"`{b['selector']}` {_interval(b['minus_lover'])}" for b in e["beaten_by"]) or "none"
        lines.append(f"| {e['size']} | {e['family']} | {e['n']} | `{e['row']}` | {_interval(e['minus_majority'])} "
                     f"| {beaten} |")
    return lines
