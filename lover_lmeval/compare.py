"""`lover compare`: a leaderboard of selection strategies, with bootstrap intervals, from lm-eval runs.

Each task is evaluated once through lm-eval's `simple_evaluate` (`--model lover_hf`, so the numbers are
lm-eval's own `exact_match` per filter). Rows that the task YAML does not carry are derived from the
same in-process results: the supervised ceiling (when `supervised_verifier=` is given), the number of
distinct answers per question, and accuracy as a function of N (the first n branches, verifier refit
label-free on them). Writes `leaderboard.md`, `leaderboard.json` and `accuracy_vs_n.png`.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np

from .selection import select

log = logging.getLogger(__name__)

ROWS = ("greedy", "majority", "cot_max", "cot_sum", "lover_max", "lover_sum", "supervised_max", "supervised_sum",
        "pass_at_n")


def bootstrap_interval(correct: np.ndarray, n_boot: int, rng: np.random.Generator) -> tuple[float, float]:
    """95% percentile interval of the mean of 0/1 outcomes, resampling questions."""
    means = correct[rng.integers(0, len(correct), (n_boot, len(correct)))].mean(axis=1)
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def paired_bootstrap(a: np.ndarray, b: np.ndarray, n_boot: int, rng: np.random.Generator) -> dict:
    """Accuracy difference a - b on the same questions: mean, 95% interval, share of resamples with a <= b."""
    index = rng.integers(0, len(a), (n_boot, len(a)))
    diffs = a[index].mean(axis=1) - b[index].mean(axis=1)
    return {"diff": float(a.mean() - b.mean()), "low": float(np.percentile(diffs, 2.5)),
            "high": float(np.percentile(diffs, 97.5)), "p_not_better": float((diffs <= 0).mean())}


def table_from_samples(samples: list[dict], extract) -> tuple[dict[str, np.ndarray], list, list[str]]:
    """Per-strategy 0/1 correctness over questions (sorted by doc_id), the results, and the targets."""
    by_filter: dict[str, dict[int, float]] = {}
    results, targets = {}, {}
    for sample in samples:
        by_filter.setdefault(sample["filter"], {})[sample["doc_id"]] = float(sample["exact_match"])
        results[sample["doc_id"]] = sample["resps"][0][0]
        targets[sample["doc_id"]] = str(sample["target"]).strip()
    ids = sorted(results)
    table = {name: np.array([rows[i] for i in ids]) for name, rows in by_filter.items()}
    ordered = [results[i] for i in ids]
    gold = [targets[i] for i in ids]
    if all("supervised" in getattr(r, "verifier_probs", {}) for r in ordered):
        for reduce in ("max", "sum"):
            picked = [select(r, f"lover_{reduce}", extract, verifier="supervised") for r in ordered]
            table[f"supervised_{reduce}"] = np.array([float(p == g) for p, g in zip(picked, gold)])
    return table, ordered, gold


def accuracy_vs_n(results: list, gold: list[str], extract, extract_name: str) -> dict[str, list[float]]:
    """Majority and LoVer(sum) using only the first n branches, n = 1..N (verifier refit on them)."""
    from .results import LoverResult
    from .training import fit_on_results

    n_max = min(len(r.branches) for r in results)
    curves = {"n": list(range(1, n_max + 1)), "majority": [], "lover_sum": []}
    for n in curves["n"]:
        subset = [LoverResult(r.branches[:n], r.features[:n], None, r.layer) for r in results]
        fit_on_results(subset, extract_name)
        for strategy in ("majority", "lover_sum"):
            picked = [select(r, strategy, extract) for r in subset]
            curves[strategy].append(float(np.mean([p == g for p, g in zip(picked, gold)])))
    return curves


def render_markdown(report: dict) -> str:
    tasks = list(report["tasks"])
    lines = ["| strategy | " + " | ".join(tasks) + " |", "|---|" + "---|" * len(tasks)]
    for row in ROWS:
        cells = []
        for task in tasks:
            cell = report["tasks"][task]["rows"].get(row)
            cells.append(f"{cell['acc']:.3f} [{cell['low']:.3f}, {cell['high']:.3f}] n={cell['n']}" if cell else "–")
        lines.append(f"| {row} | " + " | ".join(cells) + " |")
    lines.append("| distinct answers / question | " + " | ".join(
        f"{report['tasks'][t]['distinct_answers']:.2f}" for t in tasks) + " |")
    lines += ["", "Paired bootstrap (same questions), LoVer(sum) minus baseline:", ""]
    for task in tasks:
        for name, stats in report["tasks"][task]["paired"].items():
            lines.append(f"- {task}, lover_sum − {name}: {stats['diff']:+.3f} [{stats['low']:+.3f}, "
                         f"{stats['high']:+.3f}], P(not better) = {stats['p_not_better']:.3f}")
    return "\n".join(lines) + "\n"


def plot_curves(curves: dict[str, dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.5))
    for task, curve in curves.items():
        for strategy, style in (("majority", "--"), ("lover_sum", "-")):
            ax.plot(curve["n"], curve[strategy], style, marker="o", label=f"{task} {strategy}")
    ax.set_xlabel("N (branches)")
    ax.set_ylabel("accuracy")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def compare(model_args: str, tasks: list[str], include_path: str, limit: int | None, out: str | Path,
            n_boot: int = 2000, seed: int = 0, gen_kwargs: str | None = None,
            apply_chat_template: bool = False) -> dict:
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager, get_task_dict

    from .answers import get_extractor
    from .training import task_extractor

    manager = TaskManager(include_path=include_path)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    report = {"model_args": model_args, "limit": limit, "n_boot": n_boot, "tasks": {}}
    curves = {}
    for task in tasks:
        extract_name = task_extractor(get_task_dict([task], manager)[task])
        extract = get_extractor(extract_name)
        evaluated = simple_evaluate(model="lover_hf", model_args=model_args, tasks=[task], limit=limit,
                                    log_samples=True, task_manager=manager, gen_kwargs=gen_kwargs or None,
                                    apply_chat_template=apply_chat_template)
        table, results, gold = table_from_samples(evaluated["samples"][task], extract)
        rows = {}
        for name, correct in table.items():
            low, high = bootstrap_interval(correct, n_boot, rng)
            rows[name] = {"acc": float(correct.mean()), "low": low, "high": high, "n": int(len(correct))}
        paired = {base: paired_bootstrap(table["lover_sum"], table[base], n_boot, rng)
                  for base in ("majority", "cot_sum") if base in table and "lover_sum" in table}
        distinct = float(np.mean([len({a.value if a else None for a in map(extract, r.texts)}) for r in results]))
        curves[task] = accuracy_vs_n(results, gold, extract, extract_name)
        report["tasks"][task] = {"extract": extract_name, "rows": rows, "paired": paired,
                                 "distinct_answers": distinct, "accuracy_vs_n": curves[task]}
    (out / "leaderboard.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / "leaderboard.md").write_text(render_markdown(report))
    plot_curves(curves, out / "accuracy_vs_n.png")
    return report


def add_arguments(parser) -> None:
    parser.add_argument("--model_args", default="", help="lover_hf model args (verifier=..., bank=..., ...)")
    parser.add_argument("--tasks", required=True, help="comma-separated task names, e.g. lover_gsm8k")
    parser.add_argument("--include_path", default="task_configs")
    parser.add_argument("--limit", type=int, default=None)
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--n_boot", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--gen_kwargs", default=None, help="as lm_eval's, e.g. max_gen_toks=128")
    parser.add_argument("--apply_chat_template", action="store_true", help="as lm_eval's (match the bank's prompts)")


def run(args) -> int:
    logging.basicConfig(level=logging.INFO)
    report = compare(args.model_args, args.tasks.split(","), args.include_path, args.limit, args.out,
                     args.n_boot, args.seed, args.gen_kwargs, args.apply_chat_template)
    print(render_markdown(report))
    return 0
