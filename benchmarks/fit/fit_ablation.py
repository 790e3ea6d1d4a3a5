#!/usr/bin/env python
"""Loss ablation of the label-free fit on banked branches (no decoding): which terms matter, and does the fit
end in the "every answer false" corner?

Reads the first --limit questions of a task split from a branch bank (refuses to decode: every question must be
banked; features come from the feature cache when an earlier run left them), then, at each of --layers, fits the
verifier label-free with each spec and reports accuracy of LoVer max/sum, AUROC of the branch scores and the
mean score p (gold answers are read for scoring only, never by the fit or its restart choice).

A spec is a VerifierConfig string (verifier.config_from_string): "losses=nega+intra+inter_raw;curriculum=0.2".

    .venv/bin/python -m benchmarks.fit.fit_ablation --limit 120 --layers 12,18 \\
      --bank benchmarks/banks/qwen2.5-coder-0.5b-instruct/lover_gsm8k-test.jsonl.gz
"""

from __future__ import annotations

import argparse
import json
import time
from collections import defaultdict
from dataclasses import asdict
from pathlib import Path

from benchmarks.bench_common import RESULTS, add_model_options, model_path, offline_env, task_contexts

SPECS = tuple(f"losses={spec}" for spec in ("nega+intra+inter", "intra+inter", "nega+inter", "nega+intra",
                                            "nega+intra+inter_logic", "nega+intra+5*inter", "nega+intra+0.2*inter",
                                            "nega+intra+inter_raw", "intra+inter_raw")) + (
    "curriculum=0.2", "losses=nega+intra+inter_raw;curriculum=0.2")


# Orientation experiments (VerifierConfig.orient): row keys of the correlation and of the oriented scores, and the
# strategies the oriented row reports; the keys are those of the committed fit_orient_*.json files.
ORIENT_ROWS = {"confidence": ("confidence_correlation", "oriented_confidence", ("lover_max", "lover_sum", "cot_sum")),
               "vote": ("vote_correlation", "oriented", ("lover_max", "lover_sum"))}
# The experiments' switches (each `--NAME`, off by default): what each one adds to or changes in the plain ablation.
EXPERIMENTS = {
    "center-questions": "subtract each question's mean x+ / x- feature (over its own branches) first",
    "center-answers": "subtract the mean x+ / x- feature of all branches giving the same answer (across questions; "
                      "label-free), so that the fit cannot separate answers by their text alone",
    "orient-by-vote": "also report each fit with its scores flipped (p -> 1 - p, i.e. p+ and p- swapped) when, "
                      "label-free, they fall as the share of branches agreeing with a branch rises",
    "orient-by-confidence": "the same flip, decided by CoT-decoding's answer confidence instead of the vote",
    "vote-distill": "also a probe trained with BCE on the vote's labels (a branch is true when it gives its "
                    "question's plurality answer), 2-fold cross-fitted; label-free (row spec 'vote_distill')",
}


def center_by_answer(results, extract) -> None:
    """Subtract from every branch's features (2, D) the mean over all branches, of all questions, whose extracted
    answer is the same string (no answer: its own class). Label-free: the answers are the model's, not gold."""
    import numpy as np

    answers = [[None if (a := extract(text)) is None else a.value for text in r.texts] for r in results]
    by_answer = defaultdict(list)
    for r, row in zip(results, answers):
        for features, answer in zip(r.features, row):  # features (2, D)
            by_answer[answer].append(features)
    means = {answer: np.mean(rows, axis=0) for answer, rows in by_answer.items()}  # each (2, D)
    for r, row in zip(results, answers):
        r.features = r.features - np.stack([means[answer] for answer in row])  # (N, 2, D)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_options(p, dtype=None)
    p.add_argument("--task", default="lover_gsm8k")
    p.add_argument("--split", default="test")
    p.add_argument("--limit", type=int, default=120)
    p.add_argument("--bank", required=True)
    p.add_argument("--layers", default="", help="comma-separated feature layers (default: the middle one)")
    p.add_argument("--specs", default="|".join(SPECS), help="'|'-separated specs (see above); each later spec's "
                   "LoVer(sum) is compared with the first's, paired over the questions")
    for name, what in EXPERIMENTS.items():
        p.add_argument(f"--{name}", action="store_true", help=f"experiment: {what}")
    p.add_argument("--skip-unbanked", action="store_true",
                   help="use the banked questions among the first --limit (e.g. while a bank is still growing)")
    p.add_argument("--output", default=None)
    args = p.parse_args()
    offline_env()

    import numpy as np
    from lm_eval.tasks import TaskManager

    from lover_lmeval.apps.diagnostics import cross_fit_supervised, diagnose, strategy_correct
    from lover_lmeval.apps.samples import task_extractor
    from lover_lmeval.core.select.answers import get_extractor
    from lover_lmeval.core.verify.scoring import batch_results, fit_on_results, orient_fit, store_scores, top_pick
    from lover_lmeval.core.select.selection import select
    from lover_lmeval.core.stats import paired_bootstrap
    from lover_lmeval.core.verify.verifier import VerifierConfig, config_from_string
    from lover_lmeval.harness.model import LoverLM

    gguf = model_path(args)
    layers = [int(x) for x in args.layers.split(",") if x.strip()]
    lm = LoverLM(gguf_file=gguf, bank=args.bank, bank_only=True, verifier=None,
                 layer=layers[0] if layers else None, extra_layers=";".join(map(str, layers[1:])))
    layers = layers or [lm.pipeline.layer]
    task = TaskManager().load([args.task])["tasks"][args.task]
    extract_name = task_extractor(task)
    extract = get_extractor(extract_name)
    docs = list(task.dataset[args.split])[: args.limit]
    contexts = task_contexts(task, lm, docs)
    gen_kwargs = dict(task.config.generation_kwargs)
    t0 = time.perf_counter()
    banked = lm.in_bank(contexts, gen_kwargs)
    if not all(banked) and not args.skip_unbanked:
        raise SystemExit(f"{banked.count(False)} of the first {len(docs)} questions of {args.split} are not in the bank "
                         "(this script never decodes): check --bank/--limit/--split, or pass --skip-unbanked")
    kept = [i for i, b in enumerate(banked) if b]
    results = lm.run_contexts([contexts[i] for i in kept], gen_kwargs)
    features_s = time.perf_counter() - t0
    if len(kept) < len(docs):
        print(f"{len(docs) - len(kept)} of the first {len(docs)} questions are not banked: using the other {len(kept)}")
    gold = [str(task.doc_to_target(docs[i])).strip() for i in kept]

    def summary(strategies, scored=None, verifier="lover"):  # gold scores the rows; no fit or orientation sees it
        scored = scored or results
        diag = diagnose(scored, gold, extract, verifier)
        correct = {s: strategy_correct(scored, gold, s, extract, verifier) for s in strategies}  # each (Q,)
        return {"auroc": diag["auroc_pooled"], "auroc_per_question": diag["auroc_per_question_mean"],
                **{s: float(c.mean()) for s, c in correct.items()}}, correct["lover_sum"]

    def selector_row(strategies, baselines, scored=None, verifier="lover"):
        """summary() plus LoVer(sum)'s top-pick share and its paired difference from each baseline strategy."""
        row, correct = summary(strategies, scored, verifier)
        picks = [select(r, "lover_sum", extract, verifier=verifier) for r in scored or results]
        row["lover_sum_top_pick_share"] = top_pick(picks)[1]
        for baseline in baselines:
            row[f"lover_sum_minus_{baseline}"] = paired_bootstrap(
                correct, strategy_correct(results, gold, baseline, extract), 10_000, np.random.default_rng(0))
        return row, correct

    orient = [by for by in ORIENT_ROWS if getattr(args, f"orient_by_{by}")]
    rows = []
    first_spec_correct = {}  # layer -> LoVer(sum) correctness of the first spec, the others' paired reference
    base = [r.features for r in results]
    for layer in layers:
        for r, at_base in zip(results, base):
            r.features = at_base if layer == lm.pipeline.layer else r.layer_features[layer]
            if args.center_questions:  # label-free: only this question's own branches
                r.features = r.features - r.features.mean(axis=0, keepdims=True)  # (N, 2, D)
        if args.center_answers:
            center_by_answer(results, extract)
        if orient:  # the orientation's inputs depend on this layer's features, not on the fit
            features, mask, _, answers = batch_results(results, extract_name)
        for spec in args.specs.split("|"):
            config = config_from_string(spec)
            t0 = time.perf_counter()
            verifier = fit_on_results(results, extract_name, config).verifier  # label-free; scores in place
            fit_s = time.perf_counter() - t0
            scored, fit_correct = selector_row(("lover_max", "lover_sum", "majority", "greedy"), ("majority",))
            if layer in first_spec_correct:
                scored["lover_sum_minus_first_spec"] = paired_bootstrap(
                    fit_correct, first_spec_correct[layer], 10_000, np.random.default_rng(0))
            first_spec_correct.setdefault(layer, fit_correct)
            scored["lover_sum_correct"] = "".join(str(int(c)) for c in fit_correct)  # per question, in order
            row = {"layer": layer, "spec": spec, "fit_s": fit_s,
                   "mean_p": float(np.mean(np.concatenate([r.scores() for r in results]))), **scored}
            for by in orient:
                correlation_key, oriented_key, strategies = ORIENT_ROWS[by]
                row[correlation_key] = orient_fit(verifier, by, results, extract_name, features, mask, answers)
                store_scores(results, verifier, features, "lover")
                row[oriented_key], oriented_correct = summary(strategies)  # orient_fit restarts from the fit itself
                # paired over the same questions: is the oriented LoVer(sum) better or worse than the fit's own?
                row[oriented_key]["lover_sum_minus_fit"] = paired_bootstrap(oriented_correct, fit_correct, 10_000,
                                                                            np.random.default_rng(0))
            rows.append(row)
            print(json.dumps(row), flush=True)
        if args.vote_distill:  # the vote's answers stand in for gold in the supervised cross-fit: no label is read
            votes = [select(r, "majority", extract) for r in results]
            t0 = time.perf_counter()
            distilled = cross_fit_supervised(results, votes, extract_name, folds=2, seed=0)
            fit_s = time.perf_counter() - t0
            scored, distilled_correct = selector_row(("lover_max", "lover_sum", "majority", "cot_sum"),
                                                     ("majority", "cot_sum"), distilled, "supervised_cv")
            scored["lover_sum_correct"] = "".join(str(int(c)) for c in distilled_correct)
            row = {"layer": layer, "spec": "vote_distill", "fit_s": fit_s,
                   "mean_p": float(np.mean(np.concatenate([r.scores("supervised_cv") for r in distilled]))), **scored}
            rows.append(row)
            print(json.dumps(row), flush=True)
    out = Path(args.output or RESULTS / f"fit_ablation_{args.task}_{args.split}{args.limit}.json")
    out.write_text(json.dumps({"args": vars(args), "layer": lm.pipeline.layer, "features_s": features_s, "questions": kept,
                               "config": asdict(VerifierConfig()), "rows": rows}, indent=2) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
