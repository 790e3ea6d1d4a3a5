"""What `lover_hf` and `lover_vllm` share: lm-eval's requests in, one `LoverResult` per request out.

A mixin over an lm-eval LM class (HFLM, VLLM), whose tokenizer, context length and budget it uses: requests sharing
generation kwargs become prompt ids and one `RunSpec` (harness/generation.py resolves the kwargs against model_args),
the pipeline decodes and featurises them through its engine, and each task is fitted once, across ranks, with its own
filters' extractor (harness/ranks.py). The subclass builds `self.pipeline` (its engine) and says how many rows decode
together (`row_budget`).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

from lm_eval.models.utils import handle_stop_sequences, truncate_tokens
from tqdm import tqdm

from ..core.decode.engine import RunSpec
from ..core.pipeline import Pipeline
from ..log import log
from ..core.results import LoverResult
from .chat import warn_on_prompt_format
from . import repeats, sample_log, task_hook
from .filter import check_filters_before_decoding, evaluated_metrics
from .generation import check_requests, resolve_decoding, warn_once_if_greedy_row_is_drawn
from .model_args import LoverUsageError, banked_interrupt, usage_errors
from .ranks import fit_every_task
from .sampling_rows import add_sampling_rows
from .stock_rows import add_rows, available_rows, is_stock, plan_task
from .thinking import think_marker, view_after_thinking

task_hook.install()  # the tasks of a generate_until call, found from its requests (harness/task_hook.py)
sample_log.install()  # samples logged as texts, the evidence beside them (harness/sample_log.py)

#: lm-eval's ways of cutting a prompt longer than the context window (VLLM's truncation_side; lover_hf takes it too)
TRUNCATION_SIDES = ("left", "right", "middle")
#: Logged once a run with think_end_token: what reads the answer part, and what still reads the whole branch
THINKING_NOTE = ("%s: think_end_token=%r: answers (stock filters, lover_select's extractors, the test-time fit's "
                 "answer groups) are read after each branch's last end of thinking; LoVer's features are still read "
                 "over the whole branch, and the bank and the samples keep it whole")

#: Logged after a run with think_end_token decoded: how many branches the budget cut before their end of thinking
CUT_IN_THINKING = ("%s: %d of %d branches were cut at the token budget before their end of thinking (%r): each counts "
                   "as no answer in every selector row, the references and the fit; the task's own rows read branch 0 "
                   "whole, as lm-eval does")
#: Logged as decoding starts: what the table lm-eval prints at the end will mean.
HEADLINE = ("%s rank %d/%d: %d questions x %s branches. The table at the end has %s; each selector row picks one "
            "answer per question from these same branches: compare each with majority (the vote) and greedy")
#: The headline's rows of the lover_* tasks and users' tasks with lover_select filters
SELECT_ROWS = ("one %s row per selector (pass_at_n, an oracle that reads the gold answer, is how often any branch is "
               "right)")
#: A group's generation kwargs carry its questions' N under this key between generate_until and `prompts` (a task's
#: repeats set it; lover_vllm's phases read the groups too); popped before lm-eval's kwargs are read
BRANCHES_KEY = "_lover_n_branches"


def check_truncation_side(value) -> str:
    """lm-eval's truncation_side, refused by name unless one of TRUNCATION_SIDES (before anything loads)."""
    if value not in TRUNCATION_SIDES:
        raise LoverUsageError(f"truncation_side={value} is not a side; pass one of {', '.join(TRUNCATION_SIDES)} "
                              "(which part of a prompt longer than the context window is cut away; default left).")
    return value


class LoverRequests:
    """lm-eval's `generate_until` through the LoVer pipeline, for an LM class that has a tokenizer."""

    #: the model's name in lm-eval's registry (log lines, errors)
    NAME = "lover_hf"
    pipeline: Pipeline
    explicit: set[str]
    """The decoding model_args (and `extract`) the user set: a request may not contradict them."""

    def row_budget(self, prompts: list[list[int]], spec: RunSpec) -> int | None:
        """Rows decoded together for these prompts (None: the engine schedules its own)."""
        return None

    def before_decoding(self, groups: list[tuple[list[str], dict]]) -> None:
        """Called once the requests are checked, before any group is run: (contexts, generation kwargs) per group.
        lover_vllm's phases decode them all here (harness/vllm/phases.py)."""

    def check_branches(self, questions: list, n_of: list[int]) -> None:
        """Called before decoding with each question's N (a task's repeats can set it): refuse what the engine cannot
        serve (lover_vllm: more branches than it started for)."""

    def after_decoding(self) -> None:
        """Called once every group's questions are complete, before the fit (lover_vllm's phases discard what they
        staged)."""

    def _prompt_ids(self, context: str, max_ctx_len: int) -> list[int]:
        ids = self.tok_encode(context)
        if len(ids) > max_ctx_len:
            side = getattr(self, "truncation_side", "left")  # lm-eval's VLLM sets it; lover_hf's __init__ too
            log.warning("prompt of %d tokens exceeds the context window: keeping %d of them (%s truncation: "
                        "truncation_side=%s; HFLM truncates left).", len(ids), max_ctx_len, side, side)
            ids = truncate_tokens(ids, max_ctx_len, side)
        return ids

    def prompts(self, contexts: list[str], gen_kwargs: dict) -> tuple[list[list[int]], RunSpec]:
        """Prompt ids of contexts sharing generation kwargs, and the `RunSpec` those kwargs ask for (stop strings and
        budget as HFLM reads them, the decoding as harness/generation.py resolves it, N as `BRANCHES_KEY` says). A
        lookup: changes nothing."""
        gen_kwargs = dict(gen_kwargs)
        n_branches = gen_kwargs.pop(BRANCHES_KEY, None)
        decoding, kwargs = resolve_decoding(self.pipeline.config.decoding, self.explicit, gen_kwargs,
                                            self.max_gen_toks)
        if n_branches is not None and n_branches != decoding.n_branches:
            decoding = replace(decoding, n_branches=n_branches)
        eos_text = self.tokenizer.decode(self.eot_token_id, skip_special_tokens=False)
        until = handle_stop_sequences(kwargs.pop("until", None), eos=eos_text)
        max_gen_toks = int(kwargs.pop("max_gen_toks"))
        max_ctx_len = self.max_length - max_gen_toks
        if max_ctx_len <= 0:
            raise ValueError(f"max_gen_toks={max_gen_toks} leaves no room for the prompt in this model's "
                             f"context window of {self.max_length} tokens; lower max_gen_toks.")
        return [self._prompt_ids(c, max_ctx_len) for c in contexts], RunSpec(decoding, until, max_gen_toks)

    def in_bank(self, contexts: list[str], gen_kwargs: dict) -> list[bool]:
        """Whether each context's branches are already in the bank (decoding would skip it)."""
        if self.pipeline.bank is None:  # nothing to look up: skip tokenizing every prompt
            return [False] * len(contexts)
        return self.pipeline.banked(*self.prompts(contexts, gen_kwargs))

    def run_contexts(self, contexts: list[str], gen_kwargs: dict, on_done=None, stats: bool = True
                     ) -> list[LoverResult]:
        """The pipeline's results for contexts sharing generation kwargs, longest context first (as HFLM); `stats`:
        whether the selectors' token statistics are needed (RunSpec.stats)."""
        prompts, spec = self.prompts(contexts, gen_kwargs)
        warn_once_if_greedy_row_is_drawn(spec.decoding, self._logged)
        spec = replace(spec, max_rows=self.row_budget(prompts, spec), stats=stats)
        marker = think_marker(getattr(self, "think_end_token", None))  # HFLM's and VLLM's __init__ set it
        if marker is not None and THINKING_NOTE not in self._logged:
            self._logged.add(THINKING_NOTE)
            log.info(THINKING_NOTE, self.NAME, marker)
        views: dict[int, LoverResult] = {}

        def viewed(indices, results):  # each result once, as it comes: the bank already holds it whole
            for i, result in zip(indices, results):
                views[i] = view_after_thinking(result, marker)
            if on_done is not None:
                on_done(indices, [views[i] for i in indices])

        try:
            self.pipeline.run(prompts, spec, [len(c) for c in contexts], viewed)
            if marker is not None:
                cut = sum(getattr(view, "cut_in_thinking", 0) for view in views.values())
                total = sum(len(view.branches) for view in views.values())
                log.info(CUT_IN_THINKING, self.NAME, cut, total, marker)
            return [views[i] for i in range(len(prompts))]
        except KeyboardInterrupt:  # Ctrl-C: every question decoded so far is banked; say so (one line on the CLI)
            if self.pipeline.bank is None:
                raise
            raise banked_interrupt(self.pipeline.bank) from None

    def plan_rows(self, tasks, scored: set[str], n_of_task: dict[str, int]) -> tuple[list, list[str]]:
        """The stock tasks' plans (harness/stock_rows.py: every task without a lover_select filter) with their rows
        added to the tasks, and the selector rows; a task that cannot group its answers says so in one line. Every
        task also gets its sampling rows over its N branches (`n_of_task`; harness/sampling_rows.py), recorded for
        the results file."""
        user_extract = self.pipeline.config.selection.extract if "extract" in self.explicit else None
        plans = [plan_task(task, user_extract) for task in tasks if is_stock(task)]
        rows = available_rows(scored)
        for plan in plans:
            if plan.why_none is not None:
                log.warning(plan.why_none)
            add_rows(plan, rows)
        for task in tasks:
            name = task.config.task
            sampling = add_sampling_rows(task, n_of_task.get(name, 1), user_extract)
            if sampling is not None:
                self.pipeline.record.sampling_rows[name] = sampling.names
        return plans, rows

    def table_rows(self, tasks, plans, rows) -> str:
        """The headline's account of the rows the table will have, per kind of task."""
        stock = {plan.name: plan for plan in plans}
        parts = []
        if any(task.config.task not in stock for task in tasks) or not tasks:
            parts.append(SELECT_ROWS % (" / ".join(evaluated_metrics(
                [t for t in tasks if t.config.task not in stock])) or "metric"))
        for plan in plans:
            added = set(plan.task.lover_rows) | set(self.pipeline.record.sampling_rows.get(plan.name, ()))
            own = ", ".join(e.name for e in plan.task._filters if e.name not in added)
            parts.append(f"for {plan.name} its own rows ({own}: branch 0)" + (
                f" and {len(plan.task.lover_rows)} selector rows ({', '.join(plan.task.lover_rows[:3])}, ...; pass_at_n "
                "needs a gold field, not on stock tasks)" if plan.groupings else ", no selector row"))
        if any(self.pipeline.record.sampling_rows.values()):
            parts.append("and the references avg@N, pass@k and maj@k over each question's branches, each branch "
                         "scored by the task's own metric (they read the gold answer: not selectors)")
        return "; ".join(parts)

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[LoverResult]:
        config = self.pipeline.config
        fitting = config.selection.fit_at_test_time
        scored = (set(self.pipeline.verifiers) | set(self.pipeline.fitted_scorers)
                  | ({"ptrue"} if config.ptrue.enabled else set()))
        tasks = task_hook.tasks_of(requests)
        questions, counts = repeats.collapse(requests)  # a task's repeats: one question with K branches
        with usage_errors():  # a filter or request the model cannot serve: one line on the CLI, before any decoding
            extracts = check_filters_before_decoding(config.selection.extract if fitting else None, scored,
                                                     adopt="extract" not in self.explicit, tasks=tasks)
            check_requests(requests, config.decoding, self.explicit, self.max_gen_toks)
            n_of = [repeats.branches_for(q, config.decoding.n_branches, self.explicit) for q in questions]
            self.check_branches(questions, n_of)
            n_of_task: dict[str, int] = {}
            for question, n in zip(questions, n_of):
                name = getattr(question, "task_name", None) or ""
                n_of_task[name] = min(n_of_task.get(name, n), n)
            plans, rows = self.plan_rows(tasks, scored, n_of_task)
        extracts.update({plan.name: plan.fit_extract for plan in plans if plan.fit_extract is not None})
        unfitted = {plan.name for plan in plans if plan.fit_extract is None}
        metas = {name: verifier.meta for name, verifier in self.pipeline.verifiers.items()}
        warn_on_prompt_format([r.args[0] for r in requests[:1]], self.tokenizer, metas)
        groups = defaultdict(list)  # questions sharing generation kwargs (and N) are decoded together
        for index, (question, n) in enumerate(zip(questions, n_of)):
            groups[repr((sorted(question.args[1].items()), n))].append(index)
        kwargs_of = {key: {**questions[indices[0]].args[1], BRANCHES_KEY: n_of[indices[0]]}
                     for key, indices in groups.items()}
        results: list[LoverResult | None] = [None] * len(questions)
        self.before_decoding([([questions[i].args[0] for i in indices], kwargs_of[key])
                              for key, indices in groups.items()])
        shown = "/".join(str(n) for n in sorted(set(n_of))) or str(config.decoding.n_branches)
        log.info(HEADLINE, self.NAME, self.rank, self.world_size, len(questions), shown,
                 self.table_rows(tasks, plans, rows))
        # closed on the way out of an interrupt too, so its last refresh comes before the interrupt's message
        with tqdm(total=len(questions), disable=disable_tqdm or self.rank != 0,
                  desc=f"{self.NAME}: {shown} branches per question") as bar:
            for key, indices in groups.items():
                def done(chunk, chunk_results, indices=indices):
                    for k, result in zip(chunk, chunk_results):
                        results[indices[k]] = result
                    bar.update(len(chunk))

                self.run_contexts([questions[i].args[0] for i in indices], kwargs_of[key], done)
        self.after_decoding()
        # one fit per task, across ranks
        fit_every_task(self.pipeline, questions, results, self.world_size, extracts, unfitted)
        return repeats.expand(results, counts)

    def set_cache_hook(self, cache_hook) -> None:
        """lm-eval's `--use_cache` keys each request alone, but a LoVer answer depends on the task's whole fit."""
        if getattr(cache_hook, "dbdict", None) is not None:
            raise ValueError(f"--use_cache cannot hold {self.NAME}'s results: each answer comes from a fit over all of "
                             "a task's questions, so a cached question would keep an earlier run's fit (and "
                             "model_args). Drop --use_cache; bank=PATH keeps the decoded branches, and a re-run from it "
                             "takes seconds.")
        super().set_cache_hook(cache_hook)
