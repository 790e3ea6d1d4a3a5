"""Selector rows on lm-eval's own generative tasks (`gsm8k_cot`, `bbh_cot_fewshot_*`, `mmlu_pro_*`, ...), no YAML
written.

A task a lover model decodes that carries no `lover_select` filter gets, beside its own rows (which read branch 0,
as lm-eval's `hf` does), one row per selector: `LoverPick` picks one branch label-free and hands that branch's whole
text to the task's own chain (its regex, `multi_choice_regex`, custom filters), then to its own metric or
`process_results`, so the task's extraction and metric score every row.

The selectors' answer groups (and the test-time fit's) are the task's own reading of each branch: its chain with the
reducing steps (`take_first`, `take_first_k`, `majority_vote`, which choose among responses and read none) left out,
and the answer normalised as its `exact_match` compares it (`ignore_case`, `ignore_punctuation`, `regexes_to_ignore`,
`ignore_numbers`). The chain sees the branch text alone, never the doc (`NoDoc`): a chain that reads the doc
(`multi_choice_regex` reads its choices) or does nothing but reduce (a `process_results` task) cannot group answers
that way, and the task's rows group by `extract=` when the user names it, or it keeps its own rows alone.
"""

from __future__ import annotations

import re
import string
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import partial

from types import SimpleNamespace

from lm_eval.api.filter import Filter, FilterEnsemble
from lm_eval.filters import build_filter_ensemble
from lm_eval.filters.selection import MajorityVoteFilter, TakeFirstFilter, TakeKFilter

from ..core.select.answers import TASK_EXTRACTORS, Answer, get_extractor
from ..core.select.rows import TASK_ROWS
from ..core.select.selection import ORACLES, SCORES_READ, pick_branch
from .filter import lover_select_arguments

#: Filters that choose among a question's responses and read none: no part of how one branch's answer is read.
REDUCERS = (TakeFirstFilter, TakeKFilter, MajorityVoteFilter)
#: Joins a chain's name and a selector's in a row name where a task has several chains (`strict-match/majority`).
SEPARATOR = "/"


class DocRead(LookupError):
    """A chain step read the doc, which grouping never hands it."""


class NoDoc(Mapping):
    """The doc a chain sees while grouping: any read raises `DocRead` (the doc holds the gold answer)."""

    def __getitem__(self, key):
        raise DocRead(key)

    def __iter__(self):
        raise DocRead("iteration")

    def __len__(self):
        raise DocRead("len")


@dataclass(frozen=True)
class Chain:
    """One of a task's filter chains: its name and the steps that read a response (the reducers left out)."""

    name: str
    steps: tuple

    @property
    def key(self) -> str:
        """Equal for chains that read a response alike: their rows would be the same numbers twice."""
        return repr([(getattr(step, "func", step), sorted((getattr(step, "keywords", None) or {}).items()))
                     for step in self.steps])


def task_chains(task) -> list[Chain]:
    """The task's own chains in its order, one per distinct way of reading a response (the first name kept); the
    rows added here (`lover_rows`, `lover_sampling`) are not the task's."""
    chains: dict[str, Chain] = {}
    sampling = getattr(task, "lover_sampling", None)
    added = set(getattr(task, "lover_rows", None) or ()) | set(sampling.names if sampling is not None else ())
    for ensemble in task._filters:
        if ensemble.name in added:
            continue
        steps = tuple(step for step in ensemble.filters if getattr(step, "func", step) not in REDUCERS)
        chains.setdefault(Chain(ensemble.name, steps).key, Chain(ensemble.name, steps))
    return list(chains.values())


def metric_normaliser(task):
    """The string normalisation the task's `exact_match` applies to a prediction (identity without one)."""
    kwargs = next((entry for entry in getattr(task.config, "metric_list", None) or []
                   if entry.get("metric") == "exact_match"), {})
    ignore = [re.compile(p) for p in kwargs.get("regexes_to_ignore") or []]
    dropped = (string.punctuation if kwargs.get("ignore_punctuation") else "") + (
        string.digits if kwargs.get("ignore_numbers") else "")
    table = str.maketrans("", "", dropped)

    def normalise(value: str) -> str:
        for pattern in ignore:
            value = pattern.sub("", value)
        return (value.lower() if kwargs.get("ignore_case") else value).translate(table)

    return normalise


@dataclass(eq=False)  # hashed by identity, as every extractor is (answers.equivalence_of looks extractors up)
class ChainAnswer:
    """An extractor (text -> `Answer`) that reads a branch as the task's chain does: no answer where the chain gives
    its fallback (`[invalid]`), nothing, or an empty string; the span is the chain's output found in the text (the
    whole text where the chain rewrote it), for CoT-decoding's confidence."""

    chain: Chain
    normalise: object
    filters: list = field(init=False)

    def __post_init__(self):
        self.filters = [step() for step in self.chain.steps]
        self.fallbacks = {getattr(f, "fallback", None) for f in self.filters} - {None}

    def __call__(self, text: str) -> Answer | None:
        responses = [[text]]
        for step in self.filters:
            responses = list(step.apply(responses, [NoDoc()]))
        read = list(responses[0]) if responses else []
        out = read[0] if read else None
        if not isinstance(out, str) or not out.strip() or out in self.fallbacks:
            return None
        value = self.normalise(out)
        if not value.strip():
            return None
        start = text.rfind(out.strip())
        return Answer(value, start, start + len(out.strip())) if start >= 0 else Answer(value, 0, len(text))


def chain_extractor(task, chain: Chain) -> str | None:
    """Register the chain's reading as an extractor named `<task>/<chain>` and return the name; None when the chain
    cannot group answers from the text alone (it only reduces, or reads the doc)."""
    if not chain.steps:
        return None
    answer = ChainAnswer(chain, metric_normaliser(task))
    try:
        answer("The answer is 1.")
    except DocRead:
        return None
    name = f"{task.config.task}{SEPARATOR}{chain.name}"
    TASK_EXTRACTORS[name] = answer
    return name


class LoverPick(Filter):
    """First step of a selector row on a stock task: each question's response list becomes the one branch the
    strategy picks, as plain text, for the task's own chain (it never reads the doc)."""

    def __init__(self, strategy: str, extract: str, verifier: str = "lover") -> None:
        self.strategy, self.extract, self.verifier = strategy, get_extractor(extract), verifier

    def apply(self, resps, docs):
        picked = []
        for responses in resps:
            result = responses[0]  # with repeats: K copies of one result, each carrying all K branches
            branch = pick_branch(result, self.strategy, self.extract, self.verifier)
            picked.append([result.branches[branch].text if getattr(result, "branches", None) else str(result)])
        return picked


def available_rows(scored: set[str]) -> list[str]:
    """The selector rows a run can report: every task row but the oracles (a stock task names no gold field for
    them) and those reading scores the run does not compute."""
    def reads(row: str) -> str | None:
        return "lover" if row.startswith("lover_") else SCORES_READ.get(row)

    return [row for row in TASK_ROWS if row not in ORACLES and (reads(row) is None or reads(row) in scored)]


@dataclass
class StockPlan:
    """What a stock task gets: (row-name prefix, chain, extractor name) per chain it groups by, the fit's
    extractor, and why it has no rows (None when it has them)."""

    task: object
    groupings: list[tuple[str, Chain, str]]
    fit_extract: str | None
    why_none: str | None = None

    @property
    def name(self) -> str:
        return self.task.config.task

    def row_names(self, rows: list[str]) -> list[str]:
        return [prefix + row for prefix, _, _ in self.groupings for row in rows]


def is_stock(task) -> bool:
    """Whether a task gets selector rows from here: a generate_until task without a lover_select filter (one with
    them, a lover_* task or a user's, names its rows itself)."""
    return getattr(task.config, "output_type", None) == "generate_until" and not lover_select_arguments([task])


def plan_task(task, user_extract: str | None) -> StockPlan:
    """How a stock task's answers are grouped: by `user_extract` where the user named one, else by each of its chains
    that reads an answer from the text alone."""
    chains = task_chains(task)
    own = {ensemble.name for ensemble in task._filters}
    names = [user_extract] * len(chains) if user_extract else [chain_extractor(task, c) for c in chains]
    groupings = [(c, n) for c, n in zip(chains, names) if n is not None]
    # One chain: rows are named by the selector alone, unless the task's own rows use such a name.
    plain = len(groupings) == 1 and not own & set(TASK_ROWS)
    groupings = [("" if plain else c.name + SEPARATOR, c, n) for c, n in groupings]
    if groupings:
        return StockPlan(task, groupings, groupings[0][2])
    how = ("its answers are read in process_results" if all(not c.steps for c in chains)
           else "its filter chains read the doc (as multi_choice_regex reads the choices)")
    return StockPlan(task, [], None, f"lover: task {task.config.task}: {how}, so its branches' answers cannot be "
                                     "grouped from their text: its own rows only (branch 0) and the references avg@N "
                                     "and pass@k, no selector rows and no test-time fit; pass extract=math in "
                                     "--model_args to group them as math answers (math-verify's equivalence: a "
                                     "\\boxed{} answer, or the last expression), or extract=number|choice|yes_no|"
                                     "true_false for those answers")


def task_from_config(name: str, config: dict):
    """A task's parts that `is_stock`, `plan_task` and `lover compare`'s checks read (its type, filters and metric;
    a stock task's chains), rebuilt from its config as lm-eval's results file keeps it, so a reader in another process
    (`lover view`) reads its answers as the run did. The chains are rebuilt only for a stock task, the one whose rows
    are planned from them: ValueError when one names a filter this lm-eval does not register (a custom `!function`
    filter is kept only as text)."""
    task = SimpleNamespace(_filters=[], config=SimpleNamespace(
        task=name, filter_list=config.get("filter_list"), metric_list=config.get("metric_list"),
        output_type=config.get("output_type")))
    if not is_stock(task):
        return task
    try:
        task._filters = [build_filter_ensemble(entry["name"], [(step["function"], {k: v for k, v in step.items()
                                                                                   if k != "function"})
                                                               for step in entry["filter"]])
                         for entry in config.get("filter_list") or []]
    except KeyError as unknown:
        raise ValueError(f"task {name}: its filter chain names {unknown}, which this lm-eval does not register (a "
                         "custom filter is kept in the results file only as text)") from None
    if not task._filters:  # lm-eval's own chain of a task without filters (ConfigurableTask.__init__)
        task._filters = [build_filter_ensemble("none", [("take_first", None)])]
    return task


def add_rows(plan: StockPlan, rows: list[str], verifier: str = "lover") -> None:
    """Append the plan's selector rows to its task's filters (once per task object)."""
    task = plan.task
    if getattr(task, "lover_rows", None) is not None:
        return
    task.lover_rows = plan.row_names(rows)
    for prefix, chain, extract in plan.groupings:
        for row in rows:
            steps = [partial(LoverPick, strategy=row, extract=extract, verifier=verifier), *chain.steps,
                     partial(TakeFirstFilter)]
            task._filters.append(FilterEnsemble(name=prefix + row, filters=steps))
