"""lm-eval's side of `lover compare`: a task's extractor and metric, checked before the model loads, and its logged
samples read as per-strategy 0/1 rows over questions (scored as the task's metric scores them)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from lm_eval.api.registry import DEFAULT_METRIC_REGISTRY

from ..data.tasks import normalise_target
from ..harness.sample_log import result_of
from .diagnostics import strategy_correct

# The metrics whose per-sample value is the 0/1 correctness of the filter's pick, which every row needs
READABLE_METRICS = ("lover_match", "exact_match")


class TaskNotComparable(ValueError):
    """A task `lover compare` cannot score (no one lover_select extractor, or no metric it can read); raised before
    the model loads, and `lover compare` prints it as a one-line refusal."""


def task_extractor(task) -> str:
    """The extractor named by the task's lover_select filters (its one source of truth)."""
    names = {step.get("extract") for entry in (task.config.filter_list or []) for step in entry.get("filter", [])
             if step.get("function") == "lover_select"}
    if len(names) != 1 or None in names:
        raise ValueError(f"task {task.config.task!r} must name exactly one extractor in its lover_select "
                         f"filters (found {sorted(map(str, names))}); include one of the _lover_<extractor>.yaml bases.")
    return names.pop()


def task_metric(task, tool: str = "lover compare") -> tuple[str, str | None]:
    """The first of READABLE_METRICS in the task's metric_list (lm-eval's default for the task's output type when it
    has none), and the extractor that metric reads the gold answer with: lover_match's `extract` (its own default
    "number"), None for exact_match (the target as text)."""
    entries = task.config.metric_list
    if entries is None:
        entries = [{"metric": name} for name in DEFAULT_METRIC_REGISTRY.get(task.config.output_type, [])]
    # a metric may be a function (`metric: !function utils.score`); lm-eval names its samples' key after it
    names = [m if isinstance(m, str) else getattr(m, "__name__", repr(m)) for m in (e.get("metric") for e in entries)]
    for name, entry in zip(names, entries):
        if name in READABLE_METRICS:
            return name, entry.get("extract", "number") if name == "lover_match" else None
    raise TaskNotComparable(
        f"{tool} cannot read the metric of task {task.config.task!r} (found {names}): it needs each question's "
        f"0/1 score of the selected answer; list `metric: lover_match` (as README's 'Bring your own task' does) or "
        f"`metric: exact_match` (targets already in the extractor's normal form) in the task's metric_list.")


@dataclass(frozen=True)
class TaskReading:
    """How `lover compare` reads one task's answers and scores (check_task)."""

    extract: str
    """The extractor that groups the branches' answers (a stock task's: its first chain's, harness/stock_rows.py)."""
    metric: str
    """The metric whose per-sample value is each row's 0/1 (READABLE_METRICS)."""
    gold_extract: str | None
    """The extractor the metric reads the gold answer with (task_metric)."""
    prefix: str = ""
    """Before each selector's name in the task's rows: a stock task with several chains names its rows
    `<chain>/<selector>`, and compare pairs those of the chain it groups by."""
    normalise: Callable[[str], str] | None = None
    """A stock task's exact_match normalisation of the gold answer, as lm-eval scores its rows (None: none)."""


def check_task(task, user_extract: str | None = None, tool: str = "lover compare") -> TaskReading:
    """How `tool` (compare, view) reads the task (TaskReading), or TaskNotComparable naming what is wrong: what
    `compare` checks of every task before any model loads or decodes. A task with lover_select filters names its
    extractor there; a stock task (none) is grouped as lover_hf groups it (harness/stock_rows.py: `user_extract`, the
    model_args' extract=, else its first chain that reads an answer from the text)."""
    from ..harness.stock_rows import is_stock, metric_normaliser, plan_task

    if is_stock(task):
        plan = plan_task(task, user_extract)
        if plan.fit_extract is None:
            raise TaskNotComparable(f"{tool}: {plan.why_none.removeprefix('lover: ')}")
        return TaskReading(plan.fit_extract, *task_metric(task, tool), plan.groupings[0][0], metric_normaliser(task))
    try:
        extract_name = task_extractor(task)
    except ValueError as error:
        raise TaskNotComparable(f"{tool}: {error}") from None
    return TaskReading(extract_name, *task_metric(task, tool))


def metric_gold(target, gold_extract: str | None) -> str:
    """The gold answer as the metric compares it: the stripped text (exact_match, `gold_extract=None`), else its
    normal form under `gold_extract` ("51.0" -> "51"; the stripped text when that extractor cannot read it), as
    lover_match does (harness/metric.py), so the rows computed here (verifier rows, diagnostics, curves) agree."""
    gold = str(target).strip()
    if gold_extract is None:
        return gold
    try:
        return normalise_target(gold, gold_extract)
    except ValueError:
        return gold


def verifier_rows(results: list, gold: list[str], extract, verifier: str, prefix: str,
                  tag: str = "") -> dict[str, np.ndarray]:
    """Rows `{prefix}_max{tag}` / `{prefix}_sum{tag}`: LoVer selection with the scores of `verifier`; `tag` says
    how many gold labels made it (checkpoints.label_tag)."""
    return {f"{prefix}_{reduce}{tag}": strategy_correct(results, gold, f"lover_{reduce}", extract, verifier)
            for reduce in ("max", "sum")}


def table_from_samples(samples: list[dict], extract, metric: str = "exact_match", gold_extract: str | None = None,
                       normalise: Callable[[str], str] | None = None
                       ) -> tuple[dict[str, np.ndarray], list, list[str], list[int]]:
    """Per-strategy 0/1 correctness over questions (sorted by doc_id) from lm-eval's logged samples, as `metric`
    scored them; the results, the gold answers as `metric` reads them (metric_gold, then `normalise`: a stock task's
    exact_match normalisation), the doc_ids."""
    by_filter: dict[str, dict[int, float]] = {}
    results, targets = {}, {}
    for sample in samples:
        if metric not in sample:
            raise TaskNotComparable(f"lover compare reads metric {metric!r}, but lm-eval's samples carry "
                                    f"{sample.get('metrics')}; name the task's metric in its metric_list.")
        by_filter.setdefault(sample["filter"], {})[sample["doc_id"]] = float(sample[metric])
        results[sample["doc_id"]] = result_of(sample) or sample["resps"][0][0]
        gold = metric_gold(sample["target"], gold_extract)
        targets[sample["doc_id"]] = normalise(gold) if normalise is not None else gold
    ids = sorted(results)
    table = {name: np.array([rows[i] for i in ids]) for name, rows in by_filter.items()}
    ordered = [results[i] for i in ids]
    gold = [targets[i] for i in ids]
    if all("supervised" in getattr(r, "verifier_probs", {}) for r in ordered):
        table.update(verifier_rows(ordered, gold, extract, "supervised", "supervised"))
    return table, ordered, gold, ids


def split_sampling_rows(table: dict[str, np.ndarray], names, prefix: str = "") -> dict[str, np.ndarray]:
    """Take the run's sampling rows (avg@N, pass@k, maj@k: `names`, as the results file's provenance lists them,
    harness/sampling_rows.py) out of `table`, where they would pass for selectors: they read the gold answer. Returns
    those of one chain, by their plain names: the chain `prefix` names (a stock task's rows of the chain its answers
    are grouped by), else the first chain that has them."""
    taken = {name: table.pop(name) for name in names if name in table}
    chains: dict[str, dict[str, np.ndarray]] = {}
    for name, values in taken.items():
        chain, _, row = name.rpartition("/")
        chains.setdefault(chain + "/" if chain else "", {})[row] = values
    return chains.get(prefix) or next(iter(chains.values()), {})


def tagged_rows(tags: dict[str, str], verifiers: list[str]) -> dict[str, str]:
    """Row name -> the name it is shown under: a verifier made with gold labels says how many in its rows' names
    (`lover_max` -> `lover_max[dev66]`, checkpoints.label_tag); a label-free one ("" tag) keeps its names."""
    return {f"{name}_{reduce}": f"{name}_{reduce}{tags[name]}" for name in verifiers for reduce in ("max", "sum")
            if tags.get(name)}
