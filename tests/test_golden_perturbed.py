"""The golden run under perturbations that stand in for another CPU: no golden value may move past its tolerance.

`test_golden.py` compares one run against `expected.json`, written on one machine. A value that a fit reaches
chaotically (a restart chosen by a near-tie, a trajectory that amplifies rounding) passes there and fails on the next
CPU kind (issue 47: four `supervised_cv` scores on an Intel Xeon). This check finds such values on the developer's
own machine: it reruns the golden pipeline with

- other float kernels: `ATEN_CPU_CAPABILITY=avx2` where torch picked AVX-512 (else `default`, the scalar ones);
- another thread count: 1 thread where torch uses several (else 2), so reductions split differently;
- the features multiplied by (1 + 1e-6 * noise), noise standard normal from a fixed seed: the order of the
  difference between two CPUs' float32 forward passes, on the cached features both commands read,

and compares each run with the unperturbed one (the `golden_baseline` fixture, shared with `test_golden.py`) by
the golden's own rules (`golden.mismatches`). Every line it lists is a value the golden would fail on some machine
that its tolerance does not cover: make it stable or move it out of the exact comparison (golden.py says which
values are out, and why).

Issue 47's first run of this check (the golden's rules then, AMD EPYC with AVX-512, 2 threads) listed 16 values:
under avx2 kernels the Xeon's four supervised_cv scores (0.38725 vs 0.00162, ...) and gsm8k's per-question AUROC
mean of lover and trained (0.667 vs 0.722); under 1 thread none; under feature noise seven lover / trained branch
scores (by up to 0.08) and three web_of_lies AUROCs (lover per question 0.345 vs 0.485 and pooled 0.575 vs 0.608,
trained per question 0.559 vs 0.517). golden.py now compares branch scores, supervised_cv's values and per-question
AUROC means as chaotic values, and pooled AUROC within a tolerance measured on such perturbations.

Two more tests keep the relaxed comparison honest: a planted logic change (scores read with p+ and p- swapped)
still fails the golden, and the chaotic supervised cross-fit keeps the properties it is for.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from golden import BANK, REPO, golden_run, mismatches

NOISE = 1e-6
"""Relative size of the feature perturbation (the issue's 1e-6: float32 rounding, 6e-8, grown over the layers)."""


def perturbed_features(source: Path, target: Path, seed: int = 0) -> int:
    """Copy the feature cache `source` to `target` with every feature file's values multiplied by
    (1 + NOISE * standard normal noise), the files in sorted order from one fixed-seed generator so the perturbation
    is the same on every run. Returns how many feature files were perturbed (other files are copied as they are)."""
    shutil.copytree(source, target)
    rng = np.random.default_rng(seed)
    files = sorted(target.rglob("*.npy"))
    for path in files:
        values = np.load(path)
        noise = rng.standard_normal(values.shape).astype(np.float64)
        np.save(path, (values * (1.0 + NOISE * noise)).astype(values.dtype))
    return len(files)


def perturbations() -> dict[str, dict[str, str]]:
    """Name -> environment of each run whose kernels or threads differ from this machine's own choice."""
    kernels = "avx2" if torch.backends.cpu.get_cpu_capability() == "AVX512" else "default"
    threads = "1" if torch.get_num_threads() > 1 else "2"
    return {f"ATEN_CPU_CAPABILITY={kernels}": {"ATEN_CPU_CAPABILITY": kernels},
            f"{threads} thread(s)": {"OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads}}


@pytest.mark.slow
def test_no_golden_value_moves_under_perturbations_standing_in_for_another_cpu(golden_baseline, tmp_path):
    baseline, baseline_features = golden_baseline
    runs = {}
    for name, env in perturbations().items():
        (run := tmp_path / name.replace("=", "-").replace(" ", "-")).mkdir()
        runs[name] = golden_run(run, env=env)
    features = tmp_path / "noisy-features"
    assert perturbed_features(baseline_features, features) > 0, "the baseline left no cached features to perturb"
    (run := tmp_path / "noise").mkdir()
    runs[f"features x (1 + {NOISE:g} noise)"] = golden_run(run, features=features)
    moved = [f"{name}: {line}" for name, run in runs.items() for line in mismatches(run, baseline)]
    assert not moved, (f"{len(moved)} golden values moved under perturbations standing in for another CPU: make "
                       "each stable or move it out of the exact comparison (tests/golden.py):\n" + "\n".join(moved))
    # A perturbation that moves nothing tests nothing: other kernels and noisy features must reach the fits' floats
    # (measured: a lover branch score moved by 0.016 and 0.078). Threads may not, on a machine that splits no sum.
    inert = [name for name, run in runs.items() if "thread" not in name and json.loads(json.dumps(run)) == baseline]
    assert not inert, f"these perturbations changed no golden value, so they check nothing: {inert}"


# Imported by every `lover` process of the planted run (PYTHONPATH): the scoring stage reads each verifier's p+ and
# p- the wrong way round, as an orientation bug would, so every score s becomes 1 - s (0.5 (p- + 1 - p+)).
PLANTED = """import lover_lmeval.core.verify.scoring as scoring
_verifier_on = scoring.verifier_on
scoring.verifier_on = lambda verifier, features: tuple(reversed(_verifier_on(verifier, features)))
"""


@pytest.mark.slow
def test_the_golden_fails_on_a_planted_logic_change(golden_baseline, tmp_path):
    """Scores read with p+ and p- swapped (s -> 1 - s) change no answer, loss or tensor, only what scores decide,
    which golden.py compares by aggregates and picks now that each branch's score is chaotic. Hand-worked from the
    baseline: gsm8k's lover mean score on wrong branches 0.233 -> 0.767 (moved 0.53 > MEAN_SCORE_TOL 0.05) and its
    pooled AUROC 0.66 -> 0.34 (0.32 > RANKED_TOL 0.12); the same for trained, whose checkpoint is unchanged."""
    baseline, features = golden_baseline
    (plant := tmp_path / "plant").mkdir()
    (plant / "sitecustomize.py").write_text(PLANTED)
    path = os.pathsep.join(filter(None, [str(plant), os.environ.get("PYTHONPATH")]))
    (run := tmp_path / "run").mkdir()
    moved = [line.split(":")[0] for line in mismatches(golden_run(run, env={"PYTHONPATH": path}, features=features),
                                                        baseline)]
    diagnostics = "leaderboard/tasks/lover_gsm8k/diagnostics"
    assert {f"{diagnostics}/{name}/{field}" for name in ("lover", "trained")
            for field in ("mean_score_incorrect", "auroc_pooled")} <= set(moved), moved
    assert not [line for line in moved if line.startswith(("checkpoint", "branches"))], moved


def golden_results(features: Path) -> dict[str, tuple[str, list, list[str]]]:
    """Each golden task's extractor, results (branches and features) and gold answers, built as `lover compare` builds
    them (lm-eval's samples through compare.table_from_samples) from the golden bank and the baseline's feature cache:
    nothing decoded, no feature recomputed."""
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    from lover_lmeval.apps.compare import check_task, table_from_samples
    from lover_lmeval.core.select.answers import get_extractor
    from lover_lmeval.harness.model import LoverLM

    manager = TaskManager(include_path=str(REPO / "task_configs"))
    lm = LoverLM(bank=str(BANK), bank_only=True, feature_cache=str(features))
    out = {}
    for task in ("lover_gsm8k", "lover_bbh_web_of_lies"):
        extract, metric, gold_extract = check_task(manager.load([task])["tasks"][task])
        lm.pipeline.extract = extract
        samples = simple_evaluate(model=lm, tasks=[task], limit=8, log_samples=True, task_manager=manager,
                                  apply_chat_template=True)["samples"][task]
        _, results, gold, _ = table_from_samples(samples, get_extractor(extract), metric, gold_extract)
        out[task] = (extract, results, gold)
    return out


@pytest.mark.slow
def test_supervised_cross_fit_learns_its_training_folds_and_reads_no_held_out_label(golden_baseline):
    """What golden.py no longer compares of supervised_cv, as properties on the golden bank (the cross-fit of `lover
    compare`: 2 folds, seed 0). Its seed-0 folds of 4 questions (40 branches each) hold, counted from branches.jsonl,
    1 and 1 right branches on gsm8k and 13 and 8 on web_of_lies. Each fold's verifier ranks its own training branches
    better than chance (AUROC 1.0 measured, whatever solution a CPU lands on; 0.5 is chance), and the scores of a
    held-out fold do not change when its gold answers are replaced by one no branch gives (so no branch is right)."""
    from lover_lmeval.apps.diagnostics import cross_fit_supervised, supervised_fold_fits
    from lover_lmeval.core.stats import auroc
    from lover_lmeval.core.verify.scoring import batch_results, gold_labels

    for task, (extract, results, gold) in golden_results(golden_baseline[1]).items():
        _, mask, _, answers = batch_results(results, extract)
        labels = gold_labels(answers, gold, mask.shape[1])  # (Q, N) 1.0 where a branch's answer is the gold one
        fold_of, verifiers, features = supervised_fold_fits(results, gold, extract)
        right = []
        for fold, verifier in enumerate(verifiers):
            train = torch.from_numpy(fold_of != fold)
            right.append(int(labels[train][mask[train]].sum()))
            with torch.no_grad():
                scores = verifier.scores(features[train])[mask[train]].numpy()
            assert auroc(scores, labels[train][mask[train]].numpy()) > 0.9, (task, fold)
        assert right == {"lover_gsm8k": [1, 1], "lover_bbh_web_of_lies": [13, 8]}[task], (task, right)

        held_out = np.flatnonzero(fold_of == 0)
        scored = cross_fit_supervised(results, gold, extract)
        scrambled = [("no branch says this" if q in held_out else g) for q, g in enumerate(gold)]
        rescored = cross_fit_supervised(results, scrambled, extract)
        same = [np.array_equal(scored[q].scores("supervised_cv"), rescored[q].scores("supervised_cv"))
                for q in range(len(results))]
        assert all(same[q] for q in held_out), task  # one process: the same fit gives the same bits
