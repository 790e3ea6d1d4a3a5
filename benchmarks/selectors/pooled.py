"""What run 19 B's readings of the selector reports share (selectors_table.py, lover_standing.py, sampled_vs_cot.py):
the task families, the paired bootstrap every interval uses and its text, a family's sets pooled into one
outcome vector per selector, and the compact figure's panels (one per model size and family, pooled)."""

from __future__ import annotations

import numpy as np

from lover_lmeval.core.select.selection import ORACLES
from lover_lmeval.core.stats import paired_bootstrap

FAMILIES = {  # run 19 B's (benchmarks/runs/run19_cut_branches_selectors.md)
    "arithmetic": ("gsm8k", "igsm", "bbh_multistep_arithmetic_two", "bbh_object_counting"),
    "yes/no, true/false": ("bbh_boolean_expressions", "bbh_causal_judgement", "bbh_navigate", "bbh_web_of_lies",
                           "hotpotqa_yesno"),
    "multiple choice": ("mmlu_pro",),
    # Run 32 (session 40): the first math-expression set; run 19 B's rule applied to it unchanged.
    "math expressions": ("math500",),
}


def paired(a: np.ndarray, b: np.ndarray) -> dict:
    """Accuracy a − b on the same questions, 95% paired bootstrap interval (10,000 resamples, seed 0)."""
    return paired_bootstrap(a, b, 10_000, np.random.default_rng(0))


def interval(d: dict) -> str:
    return f"{d['diff']:+.3f} [{d['low']:+.3f}, {d['high']:+.3f}]"


def pool(reports: dict[str, dict], names: list[str], strategies: list[str]) -> dict[str, np.ndarray]:
    """Per strategy, its 0/1 outcomes over the sets `names`, one after the other in that order (it fixes the
    bootstrap's resamples, so every reading pools in the reports' order)."""
    return {s: np.concatenate([[q["correct"][s] for q in reports[name]["questions"]] for name in names]).astype(float)
            for s in strategies}


def family_groups(reports: dict[str, dict]):
    """Per model size and task family (`FAMILIES`) with a set in `reports`: (size, family, the size's sets of the
    family in the reports' order, the label-free rows every one of them holds). The order fixes each pooling."""
    for size in dict.fromkeys(name.split("/")[0] for name in reports):
        for family, stems in FAMILIES.items():
            names = [name for name in reports if name in {f"{size}/{stem}" for stem in stems}]
            if not names:
                continue
            held = [set(reports[name]["questions"][0]["correct"]) for name in names]
            strategies = [s for s in reports[names[0]]["questions"][0]["correct"]
                          if s not in ORACLES and all(s in h for h in held)]
            yield size, family, names, strategies


def pooled_panels(reports: dict[str, dict]) -> list[dict]:
    """The compact figure's panels: per model size and task family, the size's sets of the family pooled, and per row
    every set of them holds, its pooled paired difference from majority. A description, like the per-set grid: the
    recommendation pools the 0.5B sets alone (selectors_table.recommend)."""
    panels = []
    for size, family, names, strategies in family_groups(reports):
        pooled = pool(reports, names, strategies)
        panels.append({"size": size, "family": family, "sets": names, "n": len(pooled["majority"]),
                       "majority_acc": float(pooled["majority"].mean()),
                       "minus_majority": {s: paired(pooled[s], pooled["majority"])
                                          for s in strategies if s != "majority"}})
    return panels
