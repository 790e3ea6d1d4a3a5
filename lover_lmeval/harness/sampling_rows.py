"""The sampling rows in lm-eval's own table: avg@N, pass@k and maj@k over a question's N branches, each branch scored
by the task's own chain and metric, on any generative task a lover model serves (a `lover_*` task or lm-eval's own).

What lighteval reports as `avg@n`, `pass@k` and `maj@k` and lm-eval users ask for from one run (lm-eval issues #1232,
#3297): the N branches the plugin decodes anyway, each scored as lm-eval would score it were it the one generation.
They read the gold answer (through the task's metric), so they are *references* beside the selectors, like the
`pass_at_n` oracle: no selector leaderboard, recommendation or paired interval against majority lists them, and
`lover compare` / `lover view` show them apart, under "references" (the run's provenance names them:
`sampling_rows`).

Per task and per way of reading a branch (a stock task's chains as harness/stock_rows.py finds them, the reducers left
out; a `lover_*` task's extractor), one filter per row, named `avg@N`, `pass@k`, `maj@k` for k in
`references.k_values(N)` (N: the fewest branches any of the task's questions has), prefixed `<chain>/` where the task
has several chains or its own rows already use such a name (`gsm8k_cot_self_consistency`'s `maj@8`). Each branch's
text goes through the chain's steps with the doc (a reference may read it: `multi_choice_regex` reads the choices), or
through the `lover_*` task's extractor (its stated answer, "" for none, as `lover_select` hands a pick to the metric),
then to the task's own `process_results` alone. With v_i a metric's value on branch i of n:

- avg@N = (1/n) sum_i v_i, for any numeric metric;
- pass@k = 1 - C(n - c, k) / C(n, k), c = #{i: v_i = 1} (`references.pass_at_k`, Chen et al. 2021's unbiased estimator);
- maj@k = P(majority voting over a uniformly drawn k-subset picks a right group) (`references.majority_wins`): the
  groups are the answers as the selectors group them (the chain's extractor, `extract=` where the user named one, or
  the chain's normalised output where the chain reads the doc), a group right where its first branch scores 1 (the
  branch a selector's pick hands the task).

pass@k and maj@k need a 0/1 metric: a metric with another value on any branch of this rank's questions gets avg@N
only, and a metric that is not a number (ifeval's per-instruction lists) no sampling row; each is said once. A task
whose branches cannot be grouped (scored in `process_results`, no `extract=`) gets avg@N and pass@k, no maj@k.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import partial

from lm_eval.api.filter import Filter, FilterEnsemble

from ..core.select.answers import answer_members, get_extractor, stated_answers
from ..core.select.references import k_values, majority_wins, pass_at_k
from ..log import log
from .filter import lover_select_arguments
from .stock_rows import SEPARATOR, chain_extractor, is_stock, metric_normaliser, task_chains


def row_names(n: int, groupable: bool = True) -> list[str]:
    """avg@n, then pass@k and maj@k (maj@k only where answers group) for k in k_values(n)."""
    ks = k_values(n)
    return [f"avg@{n}", *(f"pass@{k}" for k in ks), *((f"maj@{k}" for k in ks) if groupable else ())]


@dataclass
class Reading:
    """One way of reading a task's branch: its row-name prefix, the chain's steps (a stock task), the extractor that
    reads it (a lover_* task) and the one that groups its answers (None: group by the normalised chain output, or not
    at all where `groupable` is false)."""

    prefix: str
    steps: tuple = ()
    extract: str | None = None
    group_by: str | None = None
    normalise: object = None
    groupable: bool = True


@dataclass
class BranchScores:
    """A question's branches as one reading scored them: each response, each metric dict, the answer groups."""

    responses: list
    metrics: list[dict]
    groups: list[list[int]] | None


class SampledRow(list):
    """What a sampling row's filter hands `process_results` for one question: each branch's response as the task read
    it (a list: `--log_samples` writes the responses), with the branches' scores and the row's name."""

    def __init__(self, scores: BranchScores, row: str):
        super().__init__(scores.responses)
        self.scores, self.row = scores, row


@dataclass(eq=False)
class SamplingPlan:
    """A task's sampling rows: its readings, N, the task's own `process_results`, what each question scored."""

    task: object
    n: int
    readings: list[Reading]
    score: object
    scored: dict = field(default_factory=dict)
    _kinds: dict | None = None

    @property
    def names(self) -> list[str]:
        return [r.prefix + name for r in self.readings for name in row_names(self.n, r.groupable)]

    def branch_scores(self, reading: Reading, result, doc) -> BranchScores:
        """Each of the result's first N branches read and scored (once per reading and question)."""
        key = (reading.prefix, id(result))
        if key in self.scored:
            return self.scored[key][1]
        branches = list(getattr(result, "branches", None) or [])[: self.n]
        texts = [b.text for b in branches] if branches else [str(result)]
        groups = None
        if reading.extract is not None:  # a lover_* task: the stated answer, as lover_select hands its pick
            answers = stated_answers(get_extractor(reading.extract), branches)
            responses = ["" if a is None else a.value for a in answers]
        else:
            read = [texts]
            for step in reading.steps:
                read = [list(out) for out in step().apply(read, [doc])]
            responses = list(read[0]) if read else []
        if reading.group_by is not None:
            values = [None if a is None else a.value
                      for a in stated_answers(get_extractor(reading.group_by), branches)]
            groups = list(answer_members(values).values())
        elif reading.extract is not None:
            groups = list(answer_members([r or None for r in responses]).values())
        elif reading.groupable:  # a chain that reads the doc: its output, normalised as the metric compares it
            fallbacks = {getattr(step(), "fallback", None) for step in reading.steps} - {None}
            values = [None if not isinstance(r, str) or not r.strip() or r in fallbacks
                      else (reading.normalise(r) or None) for r in responses]
            groups = list(answer_members(values).values())
        metrics = [self.score(doc, [response]) for response in responses]
        scores = BranchScores(responses, metrics, groups)
        self.scored[key] = (result, scores)  # the result kept alive: its id stays this question's
        return scores

    def kinds(self) -> dict[str, str]:
        """metric -> "binary" (0/1 on every branch scored), "numeric" or "other", over every question of this rank
        (all scored by then: lm-eval applies every filter before it calls process_results); said once a task."""
        if self._kinds is None:
            values: dict[str, list] = {}
            for _, scores in self.scored.values():
                for metrics in scores.metrics:
                    for name, value in metrics.items():
                        values.setdefault(name, []).append(value)
            self._kinds = {name: _kind(vs) for name, vs in values.items()}
            task = self.task.config.task
            for name, kind in self._kinds.items():
                if kind == "numeric":
                    log.info("lover: task %s: metric %s is not 0/1 per branch: avg@%d only, no pass@k or maj@k",
                             task, name, self.n)
                elif kind == "other":
                    log.info("lover: task %s: metric %s is not a number per branch: no sampling row", task, name)
        return self._kinds

    def values(self, row: SampledRow) -> dict[str, float]:
        """The row's value per metric for one question (the module docstring's formulas)."""
        name = row.row.rsplit(SEPARATOR, 1)[-1]
        kind, k = name.split("@")
        k, n, out = int(k), len(row.scores.metrics), {}
        for metric, metric_kind in self.kinds().items():
            per_branch = [float(m[metric]) for m in row.scores.metrics if metric in m]
            if metric_kind == "other" or len(per_branch) != n:
                continue
            if kind == "avg":
                out[metric] = sum(per_branch) / n
            elif metric_kind == "binary" and kind == "pass":
                out[metric] = pass_at_k(n, int(sum(per_branch)), min(k, n))
            elif metric_kind == "binary" and kind == "maj" and row.scores.groups is not None:
                right = [per_branch[g[0]] == 1 for g in row.scores.groups]
                out[metric] = majority_wins(row.scores.groups, right, n, min(k, n))
        return out


def _kind(values: list) -> str:
    numbers = [v for v in values if isinstance(v, (bool, int, float)) and math.isfinite(float(v))]
    if len(numbers) != len(values):
        return "other"
    return "binary" if all(float(v) in (0.0, 1.0) for v in numbers) else "numeric"


class LoverBranches(Filter):
    """A sampling row's one step: each question's branches read and scored by the plan (`SamplingPlan`)."""

    def __init__(self, plan: SamplingPlan, reading: Reading, row: str) -> None:
        self.plan, self.reading, self.row = plan, reading, row

    def apply(self, resps, docs):
        return [SampledRow(self.plan.branch_scores(self.reading, responses[0], doc), self.row)
                for responses, doc in zip(resps, docs)]


def readings(task, n: int, user_extract: str | None) -> list[Reading]:
    """How the task's branches are read for its sampling rows (the module docstring)."""
    selects = lover_select_arguments([task])
    if not is_stock(task):
        extracts = [kwargs.get("extract") for _, kwargs in selects if kwargs.get("extract")]
        return [Reading("", extract=extracts[0])] if extracts else []
    chains = task_chains(task)
    own = {ensemble.name for ensemble in task._filters} - set(getattr(task, "lover_rows", None) or ())
    out = []
    for chain in chains:
        group_by = user_extract or chain_extractor(task, chain)
        out.append(Reading(chain.name + SEPARATOR, chain.steps, None, group_by, metric_normaliser(task),
                           groupable=bool(chain.steps) or group_by is not None))
    if len(out) == 1 and not own & set(row_names(n)):
        out[0].prefix = ""
    return out


def add_sampling_rows(task, n: int, user_extract: str | None) -> SamplingPlan | None:
    """Append the task's sampling rows to its filters and route their responses through its own `process_results`
    (once per task object); None where it gets none (one branch a question, or no way to read its branches)."""
    if getattr(task, "lover_sampling", None) is not None:
        return task.lover_sampling
    found = readings(task, n, user_extract) if n >= 2 else []
    if not found:
        return None
    plan = SamplingPlan(task, n, found, task.process_results)
    for reading in found:
        for name in row_names(n, reading.groupable):
            task._filters.append(FilterEnsemble(name=reading.prefix + name, filters=[
                partial(LoverBranches, plan=plan, reading=reading, row=reading.prefix + name)]))

    def process_results(doc, results):
        if results and isinstance(results[0], SampledRow):
            return plan.values(results[0])
        return plan.score(doc, results)

    task.process_results = process_results
    task.lover_sampling = plan
    return plan
