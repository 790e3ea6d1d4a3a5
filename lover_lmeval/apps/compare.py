"""`lover compare`: a leaderboard of selection strategies, with bootstrap intervals, from lm-eval runs.

Each task is evaluated once through lm-eval's `simple_evaluate` (`--model lover_hf`, so the numbers are
lm-eval's own, per filter, of the metric the task declares: `exact_match`, or `lover_match` for a user's own task;
a task with neither is refused before the model loads). Rows that the task YAML does not carry are derived from the
same in-process results: the supervised ceiling (when `supervised_verifier=` is given), the number of
distinct answers per question, accuracy as a function of N (the first n branches, verifier refit
label-free on them), a cross-fitted supervised ceiling (`supervised_cv_*`), verifier diagnostics (AUROC,
calibration, group statistics; diagnostics.py) and, with `--layers`, a label-free layer sweep. Writes
`leaderboard.md`, `leaderboard.json`, `per_question.jsonl` (every strategy's 0/1 outcome per task and doc_id),
`accuracy_vs_n.png` (and `accuracy_vs_layer.png`).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np

from .leaderboard import render_diagnostics, render_markdown
from .train import add_lm_eval_arguments, task_extractor

log = logging.getLogger(__name__)

ROWS_VERIFIERS = ("lover", "supervised", "supervised_cv")  # names taken by built-in rows
# The metrics whose per-sample value is the 0/1 correctness of the filter's pick, which every row needs
READABLE_METRICS = ("lover_match", "exact_match")


class TaskNotComparable(ValueError):
    """A task `lover compare` cannot score (no one lover_select extractor, or no metric it can read); raised before
    the model loads, and `lover compare` prints it as a one-line refusal."""


def task_metric(task) -> tuple[str, str | None]:
    """The first of READABLE_METRICS in the task's metric_list (lm-eval's default for the task's output type when it
    has none), and the extractor that metric reads the gold answer with: lover_match's `extract` (its own default
    "number"), None for exact_match (the target as text)."""
    entries = task.config.metric_list
    if entries is None:
        from lm_eval.api.registry import DEFAULT_METRIC_REGISTRY  # lazy: lm-eval takes seconds, --help must not wait

        entries = [{"metric": name} for name in DEFAULT_METRIC_REGISTRY.get(task.config.output_type, [])]
    # a metric may be a function (`metric: !function utils.score`); lm-eval names its samples' key after it
    names = [m if isinstance(m, str) else getattr(m, "__name__", repr(m)) for m in (e.get("metric") for e in entries)]
    for name, entry in zip(names, entries):
        if name in READABLE_METRICS:
            return name, entry.get("extract", "number") if name == "lover_match" else None
    raise TaskNotComparable(
        f"lover compare cannot read the metric of task {task.config.task!r} (found {names}): it needs each question's "
        f"0/1 score of the selected answer; list `metric: lover_match` (as README's 'Bring your own task' does) or "
        f"`metric: exact_match` (targets already in the extractor's normal form) in the task's metric_list.")


def check_task(task) -> tuple[str, str, str | None]:
    """The task's extractor, metric and the metric's gold extractor (task_metric), or TaskNotComparable naming what
    is wrong: what `compare` checks of every task before any model loads or decodes."""
    try:
        extract_name = task_extractor(task)
    except ValueError as error:
        raise TaskNotComparable(f"lover compare: {error}") from None
    return extract_name, *task_metric(task)


def metric_gold(target, gold_extract: str | None) -> str:
    """The gold answer as the metric compares it: the stripped text (exact_match, `gold_extract=None`), else its
    normal form under `gold_extract` ("51.0" -> "51"; the stripped text when that extractor cannot read it), as
    lover_match does (harness/metric.py), so the rows computed here (verifier rows, diagnostics, curves) agree."""
    gold = str(target).strip()
    if gold_extract is None:
        return gold
    from ..data.tasks import normalise_target  # lazy: it loads torch and datasets, --help must not wait

    try:
        return normalise_target(gold, gold_extract)
    except ValueError:
        return gold


def verifier_rows(results: list, gold: list[str], extract, verifier: str, prefix: str,
                  tag: str = "") -> dict[str, np.ndarray]:
    """Rows `{prefix}_max{tag}` / `{prefix}_sum{tag}`: LoVer selection with the scores of `verifier`; `tag` says
    how many gold labels made it (checkpoints.label_tag)."""
    from .diagnostics import strategy_correct  # lazy: it loads torch, --help must not wait

    return {f"{prefix}_{reduce}{tag}": strategy_correct(results, gold, f"lover_{reduce}", extract, verifier)
            for reduce in ("max", "sum")}


def table_from_samples(samples: list[dict], extract, metric: str = "exact_match", gold_extract: str | None = None
                       ) -> tuple[dict[str, np.ndarray], list, list[str], list[int]]:
    """Per-strategy 0/1 correctness over questions (sorted by doc_id) from lm-eval's logged samples, as `metric`
    scored them; the results, the gold answers as `metric` reads them (metric_gold), the doc_ids."""
    by_filter: dict[str, dict[int, float]] = {}
    results, targets = {}, {}
    for sample in samples:
        if metric not in sample:
            raise TaskNotComparable(f"lover compare reads metric {metric!r}, but lm-eval's samples carry "
                                    f"{sample.get('metrics')}; name the task's metric in its metric_list.")
        by_filter.setdefault(sample["filter"], {})[sample["doc_id"]] = float(sample[metric])
        results[sample["doc_id"]] = sample["resps"][0][0]
        targets[sample["doc_id"]] = metric_gold(sample["target"], gold_extract)
    ids = sorted(results)
    table = {name: np.array([rows[i] for i in ids]) for name, rows in by_filter.items()}
    ordered = [results[i] for i in ids]
    gold = [targets[i] for i in ids]
    if all("supervised" in getattr(r, "verifier_probs", {}) for r in ordered):
        table.update(verifier_rows(ordered, gold, extract, "supervised", "supervised"))
    return table, ordered, gold, ids


def tagged_rows(tags: dict[str, str], verifiers: list[str]) -> dict[str, str]:
    """Row name -> the name it is shown under: a verifier made with gold labels says how many in its rows' names
    (`lover_max` -> `lover_max[dev66]`, checkpoints.label_tag); a label-free one ("" tag) keeps its names."""
    return {f"{name}_{reduce}": f"{name}_{reduce}{tags[name]}" for name in verifiers for reduce in ("max", "sum")
            if tags.get(name)}


def accuracy_vs_n(results: list, gold: list[str], extract, extract_name: str, config=None,
                  device=None) -> dict[str, list[float]]:
    """Majority and LoVer(sum) using only the first n branches, n = 1..N (verifier refit on them, on `device`). The
    point n = N is the test-time fit's inputs when every question has N branches: that fit is reused, not redone
    (fit_cache.FITS, which only ever reuses a fit of identical inputs)."""
    # lazy: they load torch, and `lover compare --help` must not wait for it
    from ..core.results import LoverResult
    from ..core.verify.scoring import fit_on_results
    from .diagnostics import strategy_correct

    n_max = min(len(r.branches) for r in results)
    curves = {"n": list(range(1, n_max + 1)), "majority": [], "lover_sum": []}
    for n in curves["n"]:
        subset = [LoverResult(r.branches[:n], r.stored_features[:n], None, r.layer) for r in results]
        fit_on_results(subset, extract_name, config, device)
        for strategy in ("majority", "lover_sum"):
            curves[strategy].append(float(strategy_correct(subset, gold, strategy, extract).mean()))
    return curves


def compare(model_args: str, tasks: list[str], include_path: str, limit: int | None, out: str | Path,
            n_boot: int = 2000, seed: int = 0, gen_kwargs: str | None = None,
            apply_chat_template: bool = False, layers: list[int] | None = None, cv_folds: int = 2,
            checkpoints: dict[str, str] | None = None) -> dict:
    from lm_eval.tasks import TaskManager  # lazy: lm-eval takes seconds to import, --help must not wait

    manager = TaskManager(include_path=include_path)
    # Every task's extractor and metric, before the model loads: a metric read only after decoding ended the run there
    checked = {task: check_task(manager.load([task])["tasks"][task]) for task in tasks}
    # lazy: lm-eval, transformers and torch take seconds to import, and `lover compare --help` must not wait for them
    from lm_eval import simple_evaluate
    from lm_eval.utils import simple_parse_args_string

    from ..core.select.answers import get_extractor, n_answer_groups, stated_answer
    from ..core.verify.checkpoints import gold_labels_used, label_tag, load_checkpoint
    from ..core.decode.features import check_layer
    from ..core.files import write_text
    from ..core.verify.scoring import (CONSTANT_ANSWER_MIN_QUESTIONS, CONSTANT_ANSWER_SHARE, batch_results,
                                       store_scores, unparsed_counts)
    from ..core.stats import bootstrap_interval, paired_bootstrap
    from ..harness.model import LoverLM
    from .diagnostics import branch_records, cross_fit_supervised, diagnose, layer_sweep, pick_shares
    from .plots import plot_curves

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    # One model for every task; the layer sweep re-reads its weights after lm-eval is done.
    args = simple_parse_args_string(model_args)
    if layers:  # keep the sweep's features while decoding (template tokens only) instead of re-running branches
        args.setdefault("extra_layers", ";".join(map(str, layers)))
    lm = LoverLM(**args)
    pipeline = lm.pipeline
    layers = [check_layer(layer, lm.model.config.num_hidden_layers) for layer in layers or []]
    # Extra verifiers scored on the same features (e.g. one trained on the training split next to the
    # test-time fit); loading refuses checkpoints made for another model, layer or templates.
    extra = {name: load_checkpoint(path, expect=pipeline.identity) for name, path in (checkpoints or {}).items()}
    # every verifier that scores rows, with the gold labels it was made with; lover_hf's own verifier=CKPT and
    # supervised_verifier=CKPT rows are named by the task YAML, so their tags are added here
    metas = {**pipeline.verifier_meta, **{name: meta for name, (_, meta) in extra.items()}}
    tags = {name: label_tag(meta) for name, meta in metas.items()}
    report = {"model_args": model_args, "limit": limit, "n_boot": n_boot, "identity": pipeline.identity,
              "one_answer_rule": {"share": CONSTANT_ANSWER_SHARE, "min_questions": CONSTANT_ANSWER_MIN_QUESTIONS},
              "verifiers": {name: {"checkpoint": Path(checkpoints[name]).name if name in extra else "model_args",
                                   "gold_labels_used": gold_labels_used(meta),
                                   "dev_question_ids": meta.get("dev_question_ids")}
                            for name, meta in metas.items()},
              "tasks": {}}
    lover_sum = "lover_sum" + tags.get("lover", "")
    curves, layer_curves, per_question, branches = {}, {}, [], []
    for task in tasks:
        extract_name, metric, gold_extract = checked[task]
        extract = get_extractor(extract_name)
        evaluated = simple_evaluate(model=lm, tasks=[task], limit=limit, log_samples=True, task_manager=manager,
                                    gen_kwargs=gen_kwargs or None, apply_chat_template=apply_chat_template)
        table, results, gold, doc_ids = table_from_samples(evaluated["samples"][task], extract, metric, gold_extract)
        renamed = tagged_rows(tags, list(pipeline.verifier_meta))
        table = {renamed.get(row, row): correct for row, correct in table.items()}
        shares = {renamed.get(row, row): share for row, share in pick_shares(evaluated["samples"][task]).items()}
        if extra:
            features = batch_results(results, extract_name)[0]  # (Q, N, 2, D)
        for name, (verifier, _) in extra.items():
            store_scores(results, verifier, features, name)
            table.update(verifier_rows(results, gold, extract, name, name, tags[name]))
        diagnostics = {name: diagnose(results, gold, extract, name) for name in results[0].verifier_probs}
        scored = {name: results for name in results[0].verifier_probs}
        if cv_folds >= 2 and len(results) >= cv_folds:
            # Evaluation only: the supervised ceiling, each question scored by a verifier fit on other folds' labels.
            cross = cross_fit_supervised(results, gold, extract_name, folds=cv_folds, seed=seed)
            table.update(verifier_rows(cross, gold, extract, "supervised_cv", "supervised_cv"))
            diagnostics["supervised_cv"] = diagnose(cross, gold, extract, "supervised_cv")
            scored["supervised_cv"] = cross
        branches += [json.dumps(r) for r in branch_records(task, doc_ids, results, gold, extract, scored)]
        rows = {}
        for name, correct in table.items():
            low, high = bootstrap_interval(correct, n_boot, rng)
            # pick_shares' keys for an lm-eval filter's row; none for a row derived here (supervised_cv_*, ...)
            rows[name] = {"acc": float(correct.mean()), "low": low, "high": high, "n": int(len(correct)),
                          **shares.get(name, {})}
        paired = {base: paired_bootstrap(table[lover_sum], table[base], n_boot, rng)
                  for base in ("majority", "cot_sum") if base in table and lover_sum in table}
        distinct = float(np.mean([n_answer_groups([a.value if (a := stated_answer(extract, b)) else None
                                                   for b in r.branches]) for r in results]))
        # on the model's device; the curve's last point reuses the test-time fit where its inputs are the same
        curves[task] = accuracy_vs_n(results, gold, extract, extract_name, pipeline.config.fit, lm.model.device)
        unparsed, without = unparsed_counts(results, extract_name)
        report["tasks"][task] = {"extract": extract_name, "metric": metric, "rows": rows, "paired": paired,
                                 "distinct_answers": distinct, "unparsed_branches": unparsed,
                                 "questions_without_answer": without, "accuracy_vs_n": curves[task],
                                 "diagnostics": diagnostics}
        # Per question, so other runs on the same questions (or a subset) can be compared paired later
        # without re-running (benchmarks/paper/paired_rows.py); one line per question keeps the file diffable.
        per_question += [json.dumps({"task": task, "doc_id": doc_id,
                                     **{name: int(correct[k]) for name, correct in table.items()}})
                         for k, doc_id in enumerate(doc_ids)]
        if layers:
            layer_curves[task] = layer_sweep(lm.model, pipeline.template_ids, results, gold, extract, extract_name,
                                             layers, pipeline.config.fit)
            report["tasks"][task]["layer_sweep"] = layer_curves[task]
    write_text(out / "leaderboard.json", json.dumps(report, indent=2) + "\n")
    write_text(out / "per_question.jsonl", "\n".join(per_question) + "\n")
    write_text(out / "branches.jsonl", "\n".join(branches) + "\n")
    write_text(out / "leaderboard.md", render_markdown(report) + "\n" + render_diagnostics(report))
    plot_curves(curves, out / "accuracy_vs_n.png")
    if layer_curves:
        plot_curves(layer_curves, out / "accuracy_vs_layer.png", x="layers", xlabel="feature layer",
                    strategies=("lover_max", "lover_sum"))
    return report


def add_arguments(parser) -> None:
    add_lm_eval_arguments(parser)
    parser.add_argument("--tasks", required=True, help="comma-separated task names, e.g. lover_gsm8k")
    parser.add_argument("--limit", type=int, default=None, help="first N documents of each task (all if unset)")
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--n_boot", type=int, default=2000, help="bootstrap resamples per interval")
    parser.add_argument("--seed", type=int, default=0, help="seed of the bootstrap and the cross-fit")
    parser.add_argument("--layers", default="", help="comma-separated feature layers to sweep (label-free refit per "
                        "layer), e.g. 4,8,12,16,20; writes accuracy_vs_layer.png")
    parser.add_argument("--verifiers", default="", help="extra checkpoints scored on the same features, as "
                        "NAME=PATH[,NAME=PATH]; adds rows NAME_max / NAME_sum (e.g. trained=verifier_ckpts/...)")
    parser.add_argument("--cv_folds", type=int, default=2, help="folds of the cross-fitted supervised ceiling "
                        "(rows supervised_cv_*; gold labels of the other folds only); 0 skips it")


def run(args) -> int:
    logging.basicConfig(level=logging.INFO)
    try:
        layers = [int(x) for x in args.layers.split(",") if x.strip()]
    except ValueError:
        raise SystemExit(f"--layers {args.layers!r} must be comma-separated integers, e.g. 4,8,12") from None
    pairs = [item.split("=", 1) for item in args.verifiers.split(",") if item.strip()]
    if any(len(pair) != 2 or not pair[0] or pair[0] in ROWS_VERIFIERS for pair in pairs):
        raise SystemExit(f"--verifiers {args.verifiers!r} must be NAME=PATH pairs with names other than "
                         f"{', '.join(ROWS_VERIFIERS)}, e.g. trained=verifier_ckpts/m/gsm8k.safetensors")
    try:
        report = compare(args.model_args, args.tasks.split(","), args.include_path, args.limit, args.out,
                         args.n_boot, args.seed, args.gen_kwargs, args.apply_chat_template, layers, args.cv_folds,
                         dict(pairs))
    except TaskNotComparable as refusal:  # a one-line refusal, not a traceback: the task needs a fix, not the code
        raise SystemExit(str(refusal)) from None
    print(render_markdown(report))
    print(render_diagnostics(report))
    return 0
