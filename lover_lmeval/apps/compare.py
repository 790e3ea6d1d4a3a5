"""`lover compare` as a recipe: a leaderboard of selection strategies, with bootstrap intervals, from lm-eval runs.

Each task is evaluated once through lm-eval's `simple_evaluate` (`--model lover_hf`, so the numbers are
lm-eval's own, per filter, of the metric the task declares: `exact_match`, or `lover_match` for a user's own task; a
task with neither is refused before the model loads). Rows that the task YAML does not carry are derived from the same
in-process results: the sampling references avg@N, pass@k and maj@k (core/select/references.py; they read the gold
answer, so they are reported apart from the rows, under "references"), the supervised ceiling (when
`supervised_verifier=` is given), the number of distinct answers per question, accuracy as a function of N (the first
n branches, verifier refit label-free on them), a cross-fitted supervised ceiling (`supervised_cv_*`), verifier
diagnostics (AUROC, calibration, group statistics; diagnostics.py) and, with `--layers`, a label-free layer sweep.
Writes `leaderboard.md`, `leaderboard.json`, `per_question.jsonl` (every strategy's 0/1 outcome per task and doc_id),
`branches.jsonl`, `accuracy_vs_n.png` (and `accuracy_vs_layer.png`).

The steps: `setup` (every task checked, then the model and the extra verifiers, once), `compare_task` (one task
through lm-eval and the rows derived from it; samples.py reads lm-eval's side), `write_outputs`; `compare` runs
them. The command line is compare_cli.py, which imports this module only when the command runs: lm-eval,
transformers and torch take seconds to import.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from lm_eval import simple_evaluate
from lm_eval.tasks import TaskManager
from lm_eval.utils import simple_parse_args_string

from ..core.decode.features import check_layer
from ..core.files import write_text
from ..core.select.answers import get_extractor, n_answer_groups, stated_answers
from ..core.select.references import reference_rows
from ..core.select.selection import ORACLES
from ..core.stats import bootstrap_interval, interval_rng, paired_bootstrap
from ..core.verify.checkpoints import gold_labels_used, label_tag, load_checkpoint
from ..core.verify.scoring import (CONSTANT_ANSWER_MIN_QUESTIONS, CONSTANT_ANSWER_SHARE, batch_results, store_scores,
                                   unparsed_counts)
from ..harness.model import LoverLM
from .diagnostics import accuracy_vs_n, branch_records, cross_fit_supervised, diagnose, layer_sweep, pick_shares
from .leaderboard import render_diagnostics, render_markdown
from .plots import plot_curves
from .samples import TaskReading, check_task, split_sampling_rows, table_from_samples, tagged_rows, verifier_rows
from .settings import CompareSettings

@dataclass
class Comparison:
    """What every task of one comparison shares, made once by `setup`."""

    settings: CompareSettings
    manager: TaskManager
    checked: dict[str, TaskReading]
    """Per task: how its answers and scores are read (check_task)."""
    lm: LoverLM
    """One model for every task; the layer sweep re-reads its weights after lm-eval is done."""
    layers: list[int]
    """The sweep's layers as indices into hidden_states."""
    extra: dict[str, tuple]
    """Name -> (verifier, metadata) of each checkpoint scored beside lover_hf's own verifiers."""
    renamed: dict[str, str]
    """Rows of lover_hf's verifiers -> the names they are shown under (tagged_rows)."""
    lover_sum: str
    """The name of the LoVer(sum) row the paired differences are taken against."""
    header: dict
    """The report's fields before its tasks."""

    def rng(self, *names: str) -> np.random.Generator:
        """The bootstrap's resamples for one interval (stats.interval_rng with the run's seed)."""
        return interval_rng(self.settings.seed, *names)


@dataclass
class TaskOutcome:
    """What one task adds to the outputs."""

    report: dict
    per_question: list[str]
    """One JSON line per question: every row's 0/1 outcome."""
    branches: list[str]
    """One JSON line per branch (diagnostics.branch_records)."""
    accuracy_vs_n: dict
    layer_sweep: dict | None


def load_model(settings: CompareSettings) -> LoverLM:
    args = simple_parse_args_string(settings.model_args)
    # keep the sweep's features while decoding (template tokens only) instead of re-running branches
    if settings.layers:
        args.setdefault("extra_layers", ";".join(map(str, settings.layers)))
    return LoverLM(**args)


def report_header(settings: CompareSettings, lm: LoverLM, metas: dict[str, dict]) -> dict:
    """The run's settings, the model's identity, the one-answer rule and every verifier's gold labels."""
    return {"model_args": settings.model_args, "limit": settings.limit, "n_boot": settings.n_boot,
            "identity": lm.pipeline.identity,
            "one_answer_rule": {"share": CONSTANT_ANSWER_SHARE, "min_questions": CONSTANT_ANSWER_MIN_QUESTIONS},
            "verifiers": {name: {"checkpoint": Path(settings.checkpoints[name]).name
                                 if name in settings.checkpoints else "model_args",
                                 "gold_labels_used": gold_labels_used(meta),
                                 "dev_question_ids": meta.get("dev_question_ids")}
                          for name, meta in metas.items()}}


def setup(settings: CompareSettings) -> Comparison:
    manager = TaskManager(include_path=settings.include_path)
    # Every task's extractor and metric, before the model loads: a metric read only after decoding ended the run there
    user_extract = simple_parse_args_string(settings.model_args).get("extract")
    checked = {task: check_task(manager.load([task])["tasks"][task], user_extract) for task in settings.tasks}
    settings.out.mkdir(parents=True, exist_ok=True)
    lm = load_model(settings)
    layers = [check_layer(layer, lm.model.config.num_hidden_layers) for layer in settings.layers]
    # Extra verifiers scored on the same features (e.g. one trained on the training split next to the
    # test-time fit); loading refuses checkpoints made for another model, layer or templates.
    extra = {name: load_checkpoint(path, expect=lm.pipeline.identity) for name, path in settings.checkpoints.items()}
    # every verifier that scores rows, with the gold labels it was made with; lover_hf's own verifier=CKPT and
    # supervised_verifier=CKPT rows are named by the task YAML, so their tags are added here
    metas = {**{name: v.meta for name, v in lm.pipeline.verifiers.items()},
             **{name: meta for name, (_, meta) in extra.items()}}
    tags = {name: label_tag(meta) for name, meta in metas.items()}
    return Comparison(settings, manager, checked, lm, layers, extra, tagged_rows(tags, list(lm.pipeline.verifiers)),
                      "lover_sum" + tags.get("lover", ""), report_header(settings, lm, metas))


def more_verifiers(run: Comparison, results: list, gold: list[str], extract_name: str
                   ) -> tuple[dict[str, np.ndarray], dict[str, dict], dict[str, list]]:
    """The rows, diagnostics and scored results of the verifiers beyond lm-eval's filters: the extra checkpoints, then
    the cross-fitted supervised ceiling (evaluation only: each question scored by a verifier fit on the gold labels
    of the other folds)."""
    extract, rows = get_extractor(extract_name), {}
    if run.extra:
        features = batch_results(results, extract_name)[0]  # (Q, N, 2, D)
    for name, (verifier, meta) in run.extra.items():
        store_scores(results, verifier, features, name)
        rows.update(verifier_rows(results, gold, extract, name, name, label_tag(meta)))
    diagnostics = {name: diagnose(results, gold, extract, name) for name in results[0].verifier_probs}
    scored = {name: results for name in results[0].verifier_probs}
    folds = run.settings.cv_folds
    if folds >= 2 and len(results) >= folds:
        cross = cross_fit_supervised(results, gold, extract_name, folds=folds, seed=run.settings.seed)
        rows.update(verifier_rows(cross, gold, extract, "supervised_cv", "supervised_cv"))
        diagnostics["supervised_cv"] = diagnose(cross, gold, extract, "supervised_cv")
        scored["supervised_cv"] = cross
    return rows, diagnostics, scored


def interval_rows(run: Comparison, task: str, table: dict[str, np.ndarray], shares: dict[str, dict]
                  ) -> dict[str, dict]:
    """Each row's accuracy with its bootstrap interval and n; an lm-eval filter's row also its picks' shares
    (pick_shares), a row derived here none."""
    rows = {}
    for name, correct in table.items():
        low, high = bootstrap_interval(correct, run.settings.n_boot, run.rng(task, name))
        rows[name] = {"acc": float(correct.mean()), "low": low, "high": high, "n": int(len(correct)),
                      **shares.get(name, {})}
    return rows


def rows_minus_majority(run: Comparison, task: str, table: dict[str, np.ndarray], majority: str) -> dict:
    """Every row of `table` but `majority` and the oracles, minus `majority` on the same questions: the paired
    difference, its 95% interval and P(not better), each drawn from its own `run.rng(task, row, majority)` (so the
    interval is `lover view`'s and `paired_rows --minus`'s for the same pair); {} without a majority row."""
    if majority not in table:
        return {}
    return {row: paired_bootstrap(correct, table[majority], run.settings.n_boot, run.rng(task, row, majority))
            for row, correct in table.items() if row != majority and row.rsplit("/", 1)[-1] not in ORACLES}


def fit_checks(run: Comparison, task: str) -> dict:
    """What the task's test-time fits say of themselves, label-free (the run's provenance): each fit's final loss
    (LoVer's, CCS's) and the rank checks (Spearman with the vote share and with CoT-decoding's confidence) with the
    scorers named as running backwards; {} when nothing was fitted at test time."""
    record = run.lm.pipeline.record.fits.get(task, {})
    losses = {"lover": record.get("final_losses"),
              **{name: probe.get("final_losses") for name, probe in record.get("probes", {}).items()}}
    return {**({"final_losses": {name: value for name, value in losses.items() if value is not None}}
               if record else {}), **({"rank_checks": record["rank_checks"]} if "rank_checks" in record else {})}


def compare_task(run: Comparison, task: str) -> TaskOutcome:
    """One task through lm-eval, and every row, interval, curve and diagnostic derived from its results."""
    reading = run.checked[task]
    extract_name, metric, prefix = reading.extract, reading.metric, reading.prefix
    extract = get_extractor(extract_name)
    samples = simple_evaluate(model=run.lm, tasks=[task], limit=run.settings.limit, log_samples=True,
                              task_manager=run.manager, gen_kwargs=run.settings.gen_kwargs or None,
                              apply_chat_template=run.settings.apply_chat_template)["samples"][task]
    table, results, gold, doc_ids = table_from_samples(samples, extract, metric, reading.gold_extract,
                                                       reading.normalise)
    # lm-eval's sampling rows (the task's own metric on every branch) are the references, when the run has them
    sampling = run.lm.pipeline.record.sampling_rows.get(task, [])
    lm_eval_references = split_sampling_rows(table, sampling, prefix)
    table = {run.renamed.get(row, row): correct for row, correct in table.items()}
    shares = {run.renamed.get(row, row): share for row, share in pick_shares(samples).items() if row not in sampling}
    more_rows, diagnostics, scored = more_verifiers(run, results, gold, extract_name)
    table.update(more_rows)
    branches = [json.dumps(r) for r in branch_records(task, doc_ids, results, gold, extract, scored)]
    rows = interval_rows(run, task, table, shares)
    references = interval_rows(run, task, lm_eval_references or reference_rows(results, gold, extract), {})
    lover_sum = prefix + run.lover_sum  # a stock task's rows of the chain its answers are grouped by
    paired = {base: paired_bootstrap(table[lover_sum], table[prefix + base], run.settings.n_boot,
                                   run.rng(task, lover_sum, prefix + base))
              for base in ("majority", "cot_sum") if prefix + base in table and lover_sum in table}
    vs_majority = rows_minus_majority(run, task, table, prefix + "majority")
    distinct = float(np.mean([n_answer_groups([a.value if a else None for a in stated_answers(extract, r.branches)])
                              for r in results]))
    # on the model's device; the curve's last point reuses the test-time fit where its inputs are the same
    curve = accuracy_vs_n(results, gold, extract, extract_name, run.lm.pipeline.config.fit, run.lm.model.device)
    unparsed, without = unparsed_counts(results, extract_name)
    report = {"extract": extract_name, "metric": metric, "rows": rows, "references": references, "paired": paired,
              "vs_majority": vs_majority,
              "distinct_answers": distinct, "unparsed_branches": unparsed, "questions_without_answer": without,
              "accuracy_vs_n": curve, "diagnostics": diagnostics, "fit_checks": fit_checks(run, task)}
    sweep = None
    if run.layers:
        sweep = layer_sweep(run.lm.model, run.lm.pipeline.template_ids, results, gold, extract, extract_name,
                            run.layers, run.lm.pipeline.config.fit)
        report["layer_sweep"] = sweep
    # Per question, so other runs on the same questions (or a subset) can be compared paired later
    # without re-running (benchmarks/paper/paired_rows.py); one line per question keeps the file diffable.
    per_question = [json.dumps({"task": task, "doc_id": doc_id,
                                **{name: int(correct[k]) for name, correct in table.items()}})
                    for k, doc_id in enumerate(doc_ids)]
    return TaskOutcome(report, per_question, branches, curve, sweep)


def write_outputs(out: Path, report: dict, outcomes: list[tuple[str, TaskOutcome]]) -> None:
    write_text(out / "leaderboard.json", json.dumps(report, indent=2) + "\n")
    write_text(out / "per_question.jsonl", "\n".join(line for _, o in outcomes for line in o.per_question) + "\n")
    write_text(out / "branches.jsonl", "\n".join(line for _, o in outcomes for line in o.branches) + "\n")
    write_text(out / "leaderboard.md", render_markdown(report) + "\n" + render_diagnostics(report))
    plot_curves({task: o.accuracy_vs_n for task, o in outcomes}, out / "accuracy_vs_n.png")
    sweeps = {task: o.layer_sweep for task, o in outcomes if o.layer_sweep is not None}
    if sweeps:
        plot_curves(sweeps, out / "accuracy_vs_layer.png", x="layers", xlabel="feature layer",
                    strategies=("lover_max", "lover_sum"))


def compare(settings: CompareSettings) -> dict:
    """Every task of `settings` through lm-eval with one model, the rows derived from them, the outputs written;
    returns the report (leaderboard.json)."""
    run = setup(settings)
    outcomes = [(task, compare_task(run, task)) for task in settings.tasks]
    report = {**run.header, "tasks": {task: outcome.report for task, outcome in outcomes}}
    write_outputs(settings.out, report, outcomes)
    return report
