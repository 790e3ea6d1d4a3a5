"""`lover_select`: the lm-eval filter that applies one selection strategy (core/select/selection.py) per question.

It emits a plain `str` (lm-eval's own regex filter turns non-`str` into "", so this filter must come first in a
chain). Only oracle strategies (`pass_at_n`) read the doc's gold field; selectors never look at the doc.
"""

from __future__ import annotations

from functools import partial

from lm_eval.api.filter import Filter

from ..core.select.answers import get_extractor
from ..log import log, model_name
from ..core.results import model_arg_scoring
from ..core.select.selection import ORACLES, SCORES_READ, SelectionConfig, check_strategy, select


class LoverSelect(Filter):
    """lm-eval filter: `- function: lover_select` with `strategy`, `extract`, optional `verifier`, `gold`."""

    def __init__(self, strategy: str = "lover_sum", extract: str = SelectionConfig.extract, verifier: str = "lover",
                 gold: str | None = None, **kwargs) -> None:
        super().__init__(**kwargs)
        check_strategy(strategy)
        self.strategy, self.extract_name, self.verifier, self.gold = strategy, extract, verifier, gold
        self.extract = get_extractor(extract)

    def _gold(self, doc: dict) -> str | None:
        if self.strategy not in ORACLES:
            return None  # selectors never look at the doc: it holds the label
        if self.gold is None or self.gold not in doc:
            raise ValueError(f"strategy={self.strategy} needs `gold: FIELD` naming the doc's answer field; "
                             f"got gold={self.gold!r}, doc fields: {sorted(doc)}")
        answer = self.extract(str(doc[self.gold]))
        return answer.value if answer is not None else str(doc[self.gold]).strip()

    @property
    def reads_fit(self) -> bool:
        """Whether this filter selects by the test-time fit's scores (which group answers by lover_hf's extract)."""
        return self.strategy.startswith("lover_") and self.verifier == "lover"

    def check_fit_extractor(self, resps) -> None:
        """The test-time fit must have grouped answers as this filter does, or its scores mean nothing here."""
        if not self.reads_fit:
            return
        used = {getattr(r, "fit_extract", None) for rs in resps for r in rs} - {None}
        wrong = sorted(used - {self.extract_name})
        if wrong:
            raise ValueError(
                f"lover_hf fitted its test-time verifier with extract={wrong[0]}, but this task's lover_select "
                f"filters extract {self.extract_name}: pass extract={self.extract_name} in --model_args, or drop "
                "extract from --model_args (each task's fit then groups answers as its own filters do).")

    def apply(self, resps, docs):
        self.check_fit_extractor(resps)
        return [[select(r, self.strategy, self.extract, self._gold(doc), self.verifier) for r in rs]
                for rs, doc in zip(resps, docs)]


def lover_select_arguments(tasks) -> list[tuple[str, dict]]:
    """(task name, keyword arguments) of every lover_select filter of `tasks` (harness/task_hook.py's `tasks_of`).

    lm-eval builds a task's filters as `partial(FilterClass, **kwargs)` and instantiates them only when applying
    them, after every request ran; so a bad filter argument would cost the whole decode and fit: they are read here,
    before decoding."""
    return [(getattr(task, "task_name", None) or "", step.keywords) for task in tasks
            for ensemble in task._filters for step in getattr(ensemble, "filters", [])
            if isinstance(step, partial) and step.func is LoverSelect]


def evaluated_metrics(tasks) -> list[str]:
    """The metric names of `tasks` (exact_match, or lover_match for a user's own task), as their metric_list names
    them (a `!function` metric by its function's name); [] when none is found."""
    names = [getattr(m, "__name__", m) for task in tasks
             for m in (entry.get("metric") for entry in getattr(task.config, "metric_list", None) or [])]
    return sorted({str(name) for name in names if name is not None})


def check_filters_before_decoding(fit_extract: str | None, scored: set[str], adopt: bool = False, tasks=()
                                  ) -> dict[str, str]:
    """Build each lover_select filter of `tasks` once (its own checks: strategy, extractor) and check
    that each verifier a filter reads will have scores (`scored`: "lover" with verifier=fit or a checkpoint,
    "supervised" with supervised_verifier=, the plain probes "ccs" and "pca" with either, "ptrue" with ptrue=true) and
    that those reading the test-time fit group answers as it will.
    `fit_extract` is model_args' `extract` (None: no test-time fit). Raises ValueError naming the argument and the fix.

    Returns each task's extractor for its fit: with `adopt` (the user did not set `extract`) the one its own filters
    that read the fit use (a run of `lover_bbh`, whose subsets extract true/false, yes/no and numbers, fits each subset
    with its own), else `fit_extract` for every task, which a filter extracting otherwise contradicts."""
    found = [(task, LoverSelect(**kwargs)) for task, kwargs in lover_select_arguments(tasks)]
    wanted: dict[str, set[str]] = {}
    for task, select_filter in found:
        if select_filter.reads_fit:
            wanted.setdefault(task, set()).add(select_filter.extract_name)
    extracts = {}
    for task, names in wanted.items() if fit_extract is not None else ():
        if len(names) > 1:
            raise ValueError(f"task {task}'s lover_select filters read the test-time fit with different extractors "
                             f"({', '.join(sorted(names))}); one fit groups answers one way: give them one extract.")
        (extracts[task],) = names if adopt else (fit_extract,)
        if adopt and extracts[task] != fit_extract:
            log.info("%s: task %s: extract=%s, as its lover_select filters group answers (model_args set none)",
                     model_name(), task or "?", extracts[task])
    for task, select_filter in found:
        if select_filter.strategy in ORACLES and select_filter.gold is None:
            raise ValueError(f"a task's lover_select filter (strategy={select_filter.strategy}, an oracle) names no "
                             "`gold: FIELD`, the doc field holding the answer; add e.g. `gold: answer` to it.")
        reads = (select_filter.verifier if select_filter.strategy.startswith("lover_")
                 else SCORES_READ.get(select_filter.strategy))
        if reads is not None and reads not in scored:
            raise ValueError(f"a task's lover_select filter (strategy={select_filter.strategy}) reads the scores of "
                             f"verifier {reads!r}, which this run does not compute: pass {model_arg_scoring(reads)} in "
                             "--model_args, or run tasks without that row.")
        if task in extracts and select_filter.reads_fit and select_filter.extract_name != extracts[task]:
            raise ValueError(
                f"lover_hf fits its test-time verifier with extract={extracts[task]}, but a task's lover_select filter "
                f"extracts {select_filter.extract_name}: pass extract={select_filter.extract_name} in --model_args, "
                "or drop extract from --model_args (each task's fit then groups answers as its own filters do).")
    return extracts
