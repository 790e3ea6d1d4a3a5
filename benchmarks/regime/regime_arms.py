#!/usr/bin/env python
"""The Regime experiment's arms on banked questions (run 13 onwards, benchmarks/RESULTS.md): method, labels or
regime?

Every arm is a fit on the test questions' own branches (label-free objective) scored on those questions, except the
supervised ones. Banks only (`bank_only`): nothing is decoded; features come from the feature cache or one pass
over each banked branch. `--test-bank FILE` names the test bank when it is not `STEM-test.jsonl.gz` (BBH).

- D   our default test-time fit;              B   `regime=authors`, no labels;
- A'  `regime=authors`, the K dev questions' labels choosing the probe (core/verify/dev_select.py), named `[devK]`;
- E   `supervised[devK]`: the authors' probe trained with BCE on the K dev labels alone;
- cv  the 2-fold supervised cross-fit on the test questions (a ceiling, not a selector);
- `--checkpoints NAME=PATH,...`: verifiers trained elsewhere (the train-split arms: `lover train --limit 200`,
  label-free or `--select dev:66`), each scored at its own layer with the same statistics; its row's name carries
  the checkpoint's label tag and `gold_labels_used` its metadata's count.

Per arm: LoVer max / sum accuracy, per-question AUROC, top-pick share, paired bootstrap vs majority and
CoT-decoding(sum); with D and B both run, B − D paired (`B_minus_D`). Also, when the test bank holds fp32 records
of the same prompts, greedy and majority of the fp32 branches paired with the bf16 ones (the precision check).
Example (1.5B, bf16):

    LOVER_DATA_DIR=../shared/data HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 \
      .venv/bin/python -m benchmarks.regime.regime_arms \
      --model qwen2.5-coder-1.5b-instruct --dtype bfloat16 --test-docs 0:150 --dev-docs 200:266 --layers 14,28 \
      --out benchmarks/results/regime_qwen2.5-coder-1.5b-instruct/arms.json
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch
from lm_eval.tasks import TaskManager

from lover_lmeval.apps.diagnostics import cross_fit_supervised, diagnose, strategy_correct
from lover_lmeval.apps.samples import task_extractor
from lover_lmeval.core.select.answers import get_extractor, matches_gold
from lover_lmeval.core.store.bank import BankConfig
from lover_lmeval.core.verify.checkpoints import gold_labels_used, label_tag, load_checkpoint
from lover_lmeval.core.verify.dev_select import NoProbeSelected, fit_with_dev
from lover_lmeval.core.files import write_text
from lover_lmeval.core.pipeline import Pipeline
from lover_lmeval.core.results import LoverResult
from lover_lmeval.core.verify.scoring import batch_results, fit_on_results, gold_labels, store_scores, top_pick
from lover_lmeval.core.select.selection import select
from lover_lmeval.core.stats import paired_bootstrap
from lover_lmeval.core.verify.verifier import VerifierConfig, config_from_string, fit
from lover_lmeval.harness.model import LoverLM

from benchmarks.bench_common import (
    BANKS, add_model_options, docs_range, model_path, task_contexts, task_docs)

BASELINES = ("greedy", "majority", "cot_max", "cot_sum")


def at_layer(results: list[LoverResult], layer: int, main: int) -> list[LoverResult]:
    """Copies of the results carrying `layer`'s features as their main ones (N, 2, D)."""
    return [LoverResult(r.branches, r.stored_features if layer == main else r.stored_layer_features[layer], None, layer,
                        r.prompt_ids)
            for r in results]


def write_json(path: Path, report: dict) -> None:
    write_text(path, json.dumps(report, indent=1) + "\n")  # atomic: rewritten after every layer of a long run


def row(results, gold, verifier, baselines, extract_name: str, n_boot=10_000) -> dict:
    extract = get_extractor(extract_name)
    correct = {s: strategy_correct(results, gold, f"lover_{s}", extract, verifier) for s in ("max", "sum")}
    diag = diagnose(results, gold, extract, verifier)
    top = top_pick([select(r, "lover_sum", extract, verifier=verifier) for r in results])
    return {"lover_max": float(correct["max"].mean()), "lover_sum": float(correct["sum"].mean()),
            "auroc_per_question": diag["auroc_per_question_mean"], "auroc_pooled": diag["auroc_pooled"],
            "top_pick_share": None if top is None else top[1],
            **{f"sum_minus_{b}": paired_bootstrap(correct["sum"], baselines[b], n_boot, np.random.default_rng(0))
               for b in ("majority", "cot_sum")},
            "per_question_sum": "".join(str(int(c)) for c in correct["sum"])}


def precision_check(lm, prompts, spec, test_results, gold, extract_name: str) -> dict | None:
    """Greedy and majority of the fp32 records of the same prompts (keys without dtype), paired with these."""
    fp32 = [lm.pipeline.bank.get(k) for k in lm.pipeline.record_keys(prompts, spec, dtype=torch.float32)]
    both = [i for i, b in enumerate(fp32) if b is not None]
    if not both:
        return None
    extract = get_extractor(extract_name)
    out = {"n": len(both)}
    for strategy in ("greedy", "majority"):
        a = strategy_correct([test_results[i] for i in both], [gold[i] for i in both], strategy, extract)
        b = strategy_correct([LoverResult(fp32[i]) for i in both], [gold[i] for i in both], strategy, extract)
        out[strategy] = {"bf16": float(a.mean()), "fp32": float(b.mean()),
                         "bf16_minus_fp32": paired_bootstrap(a, b, 10_000, np.random.default_rng(0))}
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_model_options(parser, "qwen2.5-coder-1.5b-instruct", "bfloat16")
    parser.add_argument("--task", default="lover_gsm8k", help="lm-eval task (its filters name the extractor)")
    parser.add_argument("--bank-name", default=None,
                        help="bank file stem: STEM-test / STEM-SPLIT .jsonl.gz (default: the task's name)")
    parser.add_argument("--test-docs", default="0:150")
    parser.add_argument("--dev-split", default="train", help="split the dev questions come from (never test in a "
                        "reported run: a dry run may use it)")
    parser.add_argument("--dev-docs", default="200:266", help="documents of the dev split used as dev; 'none' for "
                        "none (then only the label-free arms and cv run)")
    parser.add_argument("--max-gen-toks", type=int, default=None, help="the banks' token budget, if not the task's")
    parser.add_argument("--layers", default="14,28", help="feature layers; the first is the model's main layer")
    parser.add_argument("--banks", default=None, help="bank folder (default benchmarks/banks/MODEL)")
    parser.add_argument("--test-bank", default=None, help="the test questions' bank file, if not BANKS/STEM-test"
                        ".jsonl.gz (a BBH set's bank has no split in its name)")
    parser.add_argument("--out", required=True)
    parser.add_argument("--checkpoints", default="", help="NAME=PATH[,NAME=PATH]: trained verifiers to score too")
    parser.add_argument("--checkpoints-only", action="store_true", help="skip the test-time arms (D, B, A', E, cv)")
    parser.add_argument("--arms", default="D,B,A',E,cv", help="which test-time arms to run (comma-separated letters)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the authors-regime fits (B, A', E)")
    parser.add_argument("--variant", action="append", default=[], metavar="NAME=FIELDS",
                        help="a C arm: B with VerifierConfig fields changed, e.g. 'C1-normalize=normalize=mean' "
                             "(label-free; select it with --arms C; repeatable)")
    args = parser.parse_args()
    docs_range(args.test_docs, "--test-docs")  # a bad range is refused before the model loads
    if args.dev_docs != "none":
        docs_range(args.dev_docs, "--dev-docs")
    task = TaskManager().load([args.task])["tasks"][args.task]
    extract_name, stem = task_extractor(task), args.bank_name or args.task  # the task's filters name the extractor
    banks = Path(args.banks) if args.banks else BANKS / args.model
    gguf = model_path(args)
    checkpoints = {}
    for item in filter(None, args.checkpoints.split(",")):
        name, path = item.split("=", 1)
        checkpoints[name] = load_checkpoint(path)  # (verifier, metadata), refused before any feature is read
    layers = [int(x) for x in args.layers.split(",")]
    test_bank = args.test_bank or str(banks / f"{stem}-test.jsonl.gz")
    lm = LoverLM(gguf_file=gguf, dtype=args.dtype, bank=test_bank, bank_only=True,
                 verifier=None, layer=layers[0], extra_layers=";".join(map(str, layers[1:])), batch_size=5,
                 extract=extract_name)
    gen_kwargs = dict(task.config.generation_kwargs)
    if args.max_gen_toks is not None:  # e.g. Regime item 6's 512-token records (regime/extend_budget.py)
        gen_kwargs["max_gen_toks"] = args.max_gen_toks

    def load(split: str, span: str, pipeline: Pipeline, option: str):
        docs = task_docs(task, split, span, option)
        contexts = task_contexts(task, lm, docs)
        prompts, spec = lm.prompts(contexts, gen_kwargs)
        spec = dataclasses.replace(spec, max_rows=5 * spec.decoding.n_branches)
        results = pipeline.run(prompts, spec, lengths=[len(c) for c in contexts])
        return results, [str(task.doc_to_target(d)).strip() for d in docs], (prompts, spec)

    began = time.perf_counter()
    test, gold, test_prompts = load("test", args.test_docs, lm.pipeline, "--test-docs")
    dev_config = dataclasses.replace(lm.pipeline.config,
                                     bank=BankConfig(str(banks / f"{stem}-{args.dev_split}.jsonl.gz"), True))
    dev_pipeline = Pipeline(lm.model, lm.tokenizer, dev_config, model_name=lm.pipeline.identity["model"])
    dev, dev_gold = [], []
    if args.dev_docs != "none":
        dev, dev_gold, _ = load(args.dev_split, args.dev_docs, dev_pipeline, "--dev-docs")
    print(f"features of {len(test)} test and {len(dev)} dev questions in {time.perf_counter() - began:.0f} s",
          flush=True)
    extract = get_extractor(extract_name)
    baselines = {s: strategy_correct(test, gold, s, extract) for s in BASELINES}
    baselines["pass_at_n (oracle)"] = np.array([
        float(matches_gold(extract, select(r, "pass_at_n", extract, gold=g), g)) for r, g in zip(test, gold)])
    report = {"args": vars(args), "n_test": len(test), "n_dev": len(dev), "gold_labels_used": {},
              "baselines": {s: float(c.mean()) for s, c in baselines.items()},
              "baseline_per_question": {s: "".join(str(int(x)) for x in c) for s, c in baselines.items()},
              "cot_sum_minus_majority": paired_bootstrap(baselines["cot_sum"], baselines["majority"], 10_000,
                                                         np.random.default_rng(0)),
              # an fp32 run would only pair its records with themselves
              "precision": (precision_check(lm, *test_prompts, test, gold, extract_name)
                            if lm.model.dtype != torch.float32 else None), "arms": {}}
    authors = dataclasses.replace(VerifierConfig.from_regime("authors"), seed=args.seed)
    wanted = set() if args.checkpoints_only else set(args.arms.split(","))
    for layer in layers:
        scored, dev_at = at_layer(test, layer, layers[0]), at_layer(dev, layer, layers[0])
        features, mask, groups, _ = batch_results(scored, extract_name)  # (Q, N, 2, D)
        if dev:
            dev_features, dev_mask, dev_groups, dev_answers = batch_results(dev_at, extract_name)
            dev_labels = gold_labels(dev_answers, dev_gold, dev_mask.shape[1])  # (K, N): the only labels arms read
        k = len(dev)
        arms = {}
        for name, (verifier, meta) in checkpoints.items():
            if meta.get("layer") != layer:
                continue
            label = f"{name}{label_tag(meta)}"
            store_scores(scored, verifier, features, label)
            entry = row(scored, gold, label, baselines, extract_name)
            entry["checkpoint"] = {k: meta.get(k) for k in ("split", "n_questions", "select", "supervised", "seed")}
            report["arms"][f"layer {layer} | {label}"] = entry
            report["gold_labels_used"][f"layer {layer} | {label}"] = gold_labels_used(meta)
            print(f"layer {layer} | {label}: sum {entry['lover_sum']:.3f} max {entry['lover_max']:.3f} "
                  f"AUROC/q {entry['auroc_per_question']}", flush=True)
        if layer == layers[0]:
            arms["D: default test-time fit"] = (VerifierConfig(), None)
        arms["B: regime=authors, label-free"] = (authors, None)
        if dev:  # the arms that read K dev labels
            arms[f"A': regime=authors + select dev:{k} [dev{k}]"] = (authors, "dev")
            arms[f"E: supervised[dev{k}] (authors' probe, BCE)"] = (authors, "supervised")
        for variant in args.variant:  # one departure from the authors' regime at a time
            name, fields = variant.split("=", 1)
            arms[f"C: {name} ({fields})"] = (config_from_string(f"regime=authors;seed={args.seed};{fields}"), None)
        for name, (config, labels) in arms.items():
            if name.split(":")[0] not in wanted:
                continue
            t0 = time.perf_counter()
            if labels is None:
                fit_on_results(scored, extract_name, config)
                verifier_name = "lover"
            else:
                verifier_name = name.split(":")[0]
                if labels == "dev":
                    try:
                        verifier = fit_with_dev(features, mask, groups, dev_features, dev_mask, dev_labels,
                                                config)[0].verifier
                    except NoProbeSelected as err:  # no try reaches the selection's dev accuracy: a result
                        report["arms"][f"layer {layer} | {name}"] = {"not_run": str(err)}
                        report["gold_labels_used"][f"layer {layer} | {name}"] = k
                        print(f"layer {layer} | {name}: not run: {err}", flush=True)
                        continue
                else:
                    verifier = fit(dev_features, dev_mask, dev_groups, config, labels=dev_labels).verifier
                store_scores(scored, verifier, features, verifier_name)
            entry = row(scored, gold, verifier_name, baselines, extract_name)
            entry["fit_seconds"] = round(time.perf_counter() - t0, 1)
            report["arms"][f"layer {layer} | {name}"] = entry
            report["gold_labels_used"][f"layer {layer} | {name}"] = 0 if labels is None else k
            print(f"layer {layer} | {name}: sum {entry['lover_sum']:.3f} max {entry['lover_max']:.3f} "
                  f"AUROC/q {entry['auroc_per_question']} ({entry['fit_seconds']} s)", flush=True)
        d_arm, b_arm = (f"layer {layer} | {a}" for a in ("D: default test-time fit", "B: regime=authors, label-free"))
        if d_arm in report["arms"] and b_arm in report["arms"]:  # does the authors' regime beat our default?
            b, d = (np.array([float(c) for c in report["arms"][a]["per_question_sum"]]) for a in (b_arm, d_arm))
            report.setdefault("B_minus_D", {})[f"layer {layer}"] = paired_bootstrap(b, d, 10_000,
                                                                                   np.random.default_rng(0))
        if "cv" in wanted:
            cross = cross_fit_supervised(scored, gold, extract_name, folds=2, seed=0)
            name = f"layer {layer} | cv: supervised 2-fold cross-fit (ceiling)"
            report["arms"][name] = row(cross, gold, "supervised_cv", baselines, extract_name)
            report["gold_labels_used"][name] = len(test) // 2
        write_json(Path(args.out), report)  # after every layer: a long run keeps what it finished
    print(json.dumps({k: v for k, v in report.items() if k not in ("baseline_per_question",)}, indent=1)[:6000])
    return 0


if __name__ == "__main__":
    sys.exit(main())
