"""Run 19 B: the same questions decoded two ways, CoT-decoding's branches and sampled paths, every selector on both.

The 2025 selectors were published on sampled paths; the plugin decodes CoT-decoding's branches by default. Both banks
of a pair hold the same questions with the same number of branches, so each selector's accuracy is paired by question
across them. Reads the two selectors_run.py reports and writes `sampled_vs_cot.md` / `.json` beside them: per selector,
accuracy minus majority on each bank (paired within the bank), accuracy on the sampled bank minus on the CoT bank
(paired by question across the banks), and per path score its AUROC on both. It describes; it chooses nothing (the
recommendation rule reads the CoT-decoding sets only).

    python -m benchmarks.selectors.sampled_vs_cot   # after selectors_run.py --set 0.5b/gsm8k and 0.5b/gsm8k_sample
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

from lover_lmeval.core.files import write_text

from benchmarks.bench_common import RESULTS
from benchmarks.selectors.pooled import interval, paired
from benchmarks.selectors.selectors_table import ORACLE, path_aurocs, set_rows

PAIRS = {"0.5b/gsm8k_sample": "0.5b/gsm8k"}  # sampled set -> the CoT-decoding set of the same questions


def _outcomes(report: dict) -> dict[tuple[str, int], dict[str, int]]:
    return {(q["task"], q["doc"]): q["correct"] for q in report["questions"]}


def compare(sampled: dict, cot: dict) -> dict:
    """Per strategy: both banks' accuracy and paired difference against majority, and sampled minus CoT paired by
    question; per path score, both AUROCs. Refuses reports that do not hold the same questions."""
    by_sampled, by_cot = _outcomes(sampled), _outcomes(cot)
    if set(by_sampled) != set(by_cot):
        only = sorted(set(by_sampled) ^ set(by_cot))
        raise SystemExit(f"{sampled['set']} and {cot['set']} hold different questions ({len(only)} in one only, "
                         f"e.g. {only[:3]}): score both sets over the same documents")
    keys = sorted(by_cot)
    strategies = [s for s in by_cot[keys[0]] if s in by_sampled[keys[0]]]
    rows_sampled, rows_cot = set_rows(sampled), set_rows(cot)
    out = {"sampled": sampled["set"], "cot": cot["set"], "n": len(keys), "strategies": {}, "auroc": {}}
    for s in strategies:
        a = np.array([by_sampled[k][s] for k in keys], dtype=float)
        b = np.array([by_cot[k][s] for k in keys], dtype=float)
        row = {"sampled_acc": float(a.mean()), "cot_acc": float(b.mean()), "sampled_minus_cot": paired(a, b)}
        if s != ORACLE:
            row |= {"sampled_minus_majority": rows_sampled[s]["minus_majority"],
                    "cot_minus_majority": rows_cot[s]["minus_majority"]}
        out["strategies"][s] = row
    aurocs_sampled, aurocs_cot = path_aurocs(sampled), path_aurocs(cot)
    out["auroc"] = {name: {"sampled": aurocs_sampled[name], "cot": aurocs_cot[name]}
                    for name in aurocs_cot if name in aurocs_sampled}
    return out


def markdown(found: dict) -> str:
    sampled, cot = found["sampled"], found["cot"]
    lines = [f"Sampled paths ({sampled}) against CoT-decoding's branches ({cot}): the same {found['n']} questions, "
             "95% paired bootstrap intervals (10,000 resamples, seed 0). `greedy` on the sampled bank is branch 0, one "
             "sampled path.", "",
             f"| selector | accuracy, CoT | accuracy, sampled | sampled − CoT (paired by question) | − majority, CoT "
             "| − majority, sampled |", "|---|---|---|---|---|---|"]
    for s, row in found["strategies"].items():
        versus = ([interval(row["cot_minus_majority"]), interval(row["sampled_minus_majority"])] if s != ORACLE
                  else ["(oracle)", "(oracle)"])
        lines.append(f"| `{s}` | {row['cot_acc']:.3f} | {row['sampled_acc']:.3f} | "
                     f"{interval(row['sampled_minus_cot'])} | " + " | ".join(versus) + " |")
    lines += ["", "AUROC of each path score against the branch's stated answer being right (branches pooled):", "",
              "| path score | CoT | sampled |", "|---|---|---|"]
    for name, pair in found["auroc"].items():
        cells = ["—" if pair[k] is None else f"{pair[k]:.3f}" for k in ("cot", "sampled")]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def reading(folder: Path) -> tuple[dict, str]:
    """(per sampled set, compare()'s result; the markdown of them all) from the selectors_run.py reports in `folder`."""
    reports = {}
    for name in [*PAIRS, *PAIRS.values()]:
        path = folder / f"{name.replace('/', '_')}.json"
        if not path.exists():
            raise SystemExit(f"{path} is missing: run benchmarks/selectors/selectors_run.py --set {name} first")
        reports[name] = json.loads(path.read_text())
    found = {sampled: compare(reports[sampled], reports[cot]) for sampled, cot in PAIRS.items()}
    return found, "\n".join(markdown(f) for f in found.values())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", default=str(RESULTS / "selectors"))
    folder = Path(parser.parse_args().results)
    found, text = reading(folder)
    write_text(folder / "sampled_vs_cot.json", json.dumps(found, indent=1))
    write_text(folder / "sampled_vs_cot.md", text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
