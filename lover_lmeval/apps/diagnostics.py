"""Why a verifier wins or loses on a run: branch-level quality beyond the selected answer's accuracy.

Everything here is *evaluation*: it reads gold answers to score what the verifier did, after the
fact. The unsupervised fits it runs (layer sweep) never see them; the supervised cross-fit is the
labelled ceiling and says so in its name.

- `diagnose`: pooled AUROC of the branch scores p_i, the mean per-question AUROC (questions with both
  correct and incorrect branches), mean score of correct vs incorrect branches, expected calibration
  error (10 equal-width bins, p_i read as P(branch correct)), and answer-group statistics: groups per
  question, gold among the answers (pass@N), gold group largest (majority right), gold group scored
  highest (the verifier's pick right), and the share of answered questions given LoVer(sum)'s most common pick
  (near 1: a constant answer, the fit separated the answers' texts rather than right from wrong: every binary
  test-time fit on the full BBH sets did, benchmarks/runs/run10_bbh_navigate_full.md).
- `pick_shares`: the same share for every strategy row, from lm-eval's own filtered answers: a row can beat majority
  on a skewed two-answer set by answering one way (greedy, short3 and LoVer all did on BBH navigate,
  benchmarks/runs/run19_cut_branches_selectors.md).
- `accuracy_vs_n`: majority and LoVer(sum) on the first n branches, n = 1..N, the verifier refit label-free on them.
- `layer_sweep`: the label-free fit refit on features of each layer, accuracy of LoVer max/sum and
  AUROC per layer. Features come from the results when lover_hf kept them (`extra_layers=`, nearly free
  while decoding), else passes over the branches' tokens (similar lengths together) for all layers.
- `branch_records`: every branch's answer, correctness, length, CoT-decoding confidence and verifier scores,
  one record per branch (`lover compare` writes them to `branches.jsonl`).
- `cross_fit_supervised`: the supervised ceiling by K-fold cross-fitting on the evaluated questions:
  each fold is scored by a verifier trained with BCE on the gold labels of the other folds only
  (`supervised_fold_fits`). On a few questions its fit is chaotic: another CPU's rounding lands on another solution
  (tests/golden.py).

Dimensions: Q questions, N branches, L layers, D hidden size.
"""

from __future__ import annotations

import numpy as np
import torch

from ..core.select.answers import answer_members, matches_gold, span_confidence, stated_answers
from ..core.decode.features import features_from_tokens
from ..core.results import LoverResult
from ..core.verify.scoring import (answer_ids, batch_results, constant_answer, fit_on_results, gold_labels,
                                   store_scores, top_pick)
from ..core.select.selection import select
from ..core.stats import auroc, expected_calibration_error
from ..core.verify.verifier import fit
from ..core.verify.verifier_config import VerifierConfig


def answer_right(answer, gold: str, extract=None) -> bool:
    """Whether an extracted answer (an `answers.Answer`, or None when nothing was extracted) is the gold one: equal, or
    by `extract`'s equivalence (`answers.matches_gold`)."""
    return answer is not None and matches_gold(extract, answer.value, gold)


def branch_correct(result, extract, gold: str) -> np.ndarray:
    """(N,) whether each branch's stated answer is the gold answer."""
    return np.array([answer_right(answer, gold, extract) for answer in stated_answers(extract, result.branches)])


def branch_records(task: str, doc_ids: list[int], results: list, gold: list[str], extract,
                   scored: dict[str, list]) -> list[dict]:
    """One record per branch: answer, right or not, finish reason, length, CoT-decoding's answer-span confidence
    and the score p_i of every verifier in `scored` (name -> results carrying it), to trace a selector's picks."""
    records = []
    for q, (doc_id, result, target) in enumerate(zip(doc_ids, results, gold)):
        scores = {name: rows[q].scores(name) for name, rows in scored.items()}
        # once per branch: both the answer (its group's representative) and whether it is right
        for k, (branch, answer) in enumerate(zip(result.branches, stated_answers(extract, result.branches))):
            records.append({"task": task, "doc_id": doc_id, "branch": k,
                            "answer": None if answer is None else answer.value,
                            "right": answer_right(answer, target, extract),
                            "finish": branch.finish_reason, "tokens": len(branch.token_ids),
                            "confidence": round(span_confidence(branch.margins, branch.offsets, answer), 5),
                            **{name: round(float(s[k]), 5) for name, s in scores.items()}})
    return records


def diagnose(results: list, gold: list[str], extract, verifier: str = "lover") -> dict:
    """Branch- and group-level statistics of one verifier's scores (see the module docstring)."""
    scores = [r.scores(verifier) for r in results]
    correct = [branch_correct(r, extract, g) for r, g in zip(results, gold)]
    pooled_s, pooled_c = np.concatenate(scores), np.concatenate(correct)
    per_question = [a for s, c in zip(scores, correct) if (a := auroc(s, c)) is not None]
    groups = [answer_members([a.value if a is not None else None for a in stated_answers(extract, r.branches)])
              for r in results]
    gold_in = [any(matches_gold(extract, answer, g) for answer in grp) for g, grp in zip(gold, groups)]
    largest = [matches_gold(extract, select(r, "majority", extract), g) for r, g in zip(results, gold)]
    top_scored = [matches_gold(extract, select(r, "lover_max", extract, verifier=verifier), g)
                  for r, g in zip(results, gold)]
    top = top_pick([select(r, "lover_sum", extract, verifier=verifier) for r in results])
    return {
        "verifier": verifier, "questions": len(results), "branches": int(len(pooled_s)),
        "branch_accuracy": float(pooled_c.mean()),
        "auroc_pooled": auroc(pooled_s, pooled_c),
        "auroc_per_question_mean": float(np.mean(per_question)) if per_question else None,
        "questions_with_both": len(per_question),
        "mean_score_correct": float(pooled_s[pooled_c].mean()) if pooled_c.any() else None,
        "mean_score_incorrect": float(pooled_s[~pooled_c].mean()) if (~pooled_c).any() else None,
        "ece": expected_calibration_error(pooled_s, pooled_c),
        "groups_per_question": float(np.mean([len(grp) for grp in groups])),
        "gold_among_answers": float(np.mean(gold_in)),
        "gold_group_largest": float(np.mean(largest)),
        "gold_group_top_scored": float(np.mean(top_scored)),
        "top_pick_share": None if top is None else top[1],
    }


def pick_shares(samples: list[dict]) -> dict[str, dict]:
    """Per filter of lm-eval's logged samples (one strategy row): "top_pick_share", the share of the answered
    questions given its most common pick (scoring.top_pick, as the test-time fit's constant-answer warning counts;
    None when none was answered), "answered", how many were, and "one_answer", whether that warning's rule
    (scoring.constant_answer) calls it one answer: then a gain over majority can be that answer meeting a skewed set,
    not selection. Reads no gold answer."""
    picks: dict[str, list[str]] = {}
    for sample in samples:
        pick = sample["filtered_resps"][0]  # one request a question
        # [pick] when lover_select ends the chain, the bare pick after a take_first (as harness/metric.py reads it)
        picks.setdefault(sample["filter"], []).append(pick[0] if isinstance(pick, list) else pick)
    return {name: {"top_pick_share": None if (found := top_pick(answers)) is None else found[1],
                   "answered": sum(1 for a in answers if a), "one_answer": constant_answer(answers) is not None}
            for name, answers in picks.items()}


def strategy_correct(results: list, gold: list[str], strategy: str, extract, verifier: str = "lover") -> np.ndarray:
    """(Q,) 1.0 where `strategy` (selection.py) picks the gold answer (`answers.matches_gold`)."""
    return np.array([float(matches_gold(extract, select(r, strategy, extract, verifier=verifier), g))
                     for r, g in zip(results, gold)])


#: accuracy_vs_n's curve has a point at every n up to this many branches, then at doubling n (and at N).
EVERY_N_UP_TO = 10


def curve_points(n_max: int) -> list[int]:
    """The n of accuracy_vs_n's points: 1..EVERY_N_UP_TO, then 2^k, then n_max. Each point refits LoVer on n branches
    a question, so every n up to N would cost O(N^2) fitted branches a question; doubling keeps the sum O(N) (N = 10:
    1..10; N = 64: 1..10, 16, 32, 64)."""
    points = list(range(1, min(n_max, EVERY_N_UP_TO) + 1))
    n = 16
    while n < n_max:
        points.append(n)
        n *= 2
    return points + ([n_max] if n_max > points[-1] else [])


def accuracy_vs_n(results: list, gold: list[str], extract, extract_name: str, config=None,
                  device=None) -> dict[str, list[float]]:
    """Majority and LoVer(sum) using only the first n branches, n in `curve_points(N)` (verifier refit on them, on
    `device`). The point n = N is the test-time fit's inputs when every question has N branches: that fit is reused,
    not redone (fit_cache.FITS, which only ever reuses a fit of identical inputs)."""
    n_max = min(len(r.branches) for r in results)
    curves = {"n": curve_points(n_max), "majority": [], "lover_sum": []}
    for n in curves["n"]:
        subset = [LoverResult(r.branches[:n], r.stored_features[:n], None, r.layer) for r in results]
        fit_on_results(subset, extract_name, config, device)
        for strategy in ("majority", "lover_sum"):
            curves[strategy].append(float(strategy_correct(subset, gold, strategy, extract).mean()))
    return curves


def layer_sweep(model, template_ids: list[list[int]], results: list, gold: list[str], extract, extract_name: str,
                layers: list[int], config=None) -> dict:
    """Refit the label-free verifier on each layer's features; accuracy (max/sum) and AUROC per layer."""
    def features_at(r, layer):  # (N, 2, D) as stored, when the result already carries this layer
        return r.stored_features if layer == r.layer else r.stored_layer_features.get(layer)

    stacked = []
    for i, r in enumerate(results):
        if all(features_at(r, layer) is not None for layer in layers):
            stacked.append(torch.stack([features_at(r, layer) for layer in layers], dim=2))  # (N, 2, L, D)
            continue
        if r.prompt_ids is None:
            raise ValueError(f"result {i} carries neither the features of layers {layers} nor its prompt_ids "
                             "(an older lm-eval request cache?): re-run without --use_cache to sweep layers.")
        stacked.append(features_from_tokens(model, r.prompt_ids, r.branches, template_ids, layers))
    sweep = {"layers": list(layers), "lover_max": [], "lover_sum": [], "auroc_pooled": []}
    for index, layer in enumerate(layers):
        at_layer = [LoverResult(r.branches, f[:, :, index], None, layer, r.prompt_ids)  # (N, 2, D)
                    for r, f in zip(results, stacked)]
        fit_on_results(at_layer, extract_name, config)
        for strategy in ("lover_max", "lover_sum"):
            sweep[strategy].append(float(strategy_correct(at_layer, gold, strategy, extract).mean()))
        sweep["auroc_pooled"].append(diagnose(at_layer, gold, extract)["auroc_pooled"])
    return sweep


def supervised_fold_fits(results: list, gold: list[str], extract_name: str, folds: int = 2, seed: int = 0,
                         config=None) -> tuple[np.ndarray, list, torch.Tensor]:
    """The supervised cross-fit's parts: each question's fold (Q,), one verifier per fold trained with BCE on the gold
    labels of the other folds only, and the (Q, N, 2, D) features they score."""
    if not 2 <= folds <= len(results):
        raise ValueError(f"folds={folds} must be between 2 and the number of questions ({len(results)}).")
    features, mask, groups, answers = batch_results(results, extract_name)  # (Q, N, 2, D), (Q, N), (Q, N)
    labels = gold_labels(answers, gold, mask.shape[1], extract_name)  # (Q, N)
    ids = answer_ids(answers, mask.shape[1])  # (Q, N); only a `balance` term in config's restart choice reads it
    fold_of = np.random.default_rng(seed).permutation(len(results)) % folds
    verifiers = []
    for fold in range(folds):
        train = torch.from_numpy(fold_of != fold)
        verifiers.append(fit(features[train], mask[train], groups[train], config or VerifierConfig(seed=seed),
                             labels=labels[train], answer_ids=ids[train]).verifier)
    return fold_of, verifiers, features


def cross_fit_supervised(results: list, gold: list[str], extract_name: str, folds: int = 2, seed: int = 0,
                         config=None) -> list:
    """Copies of `results` scored by a supervised verifier ("supervised_cv") trained on the other folds."""
    fold_of, verifiers, features = supervised_fold_fits(results, gold, extract_name, folds, seed, config)
    scored = [LoverResult(r.branches, r.stored_features, dict(r.verifier_probs), r.layer, r.prompt_ids)
              for r in results]
    for fold, verifier in enumerate(verifiers):
        held_out = [scored[q] for q in np.flatnonzero(fold_of == fold)]  # the rows of features[fold_of == fold]
        store_scores(held_out, verifier, features[torch.from_numpy(fold_of == fold)], "supervised_cv")
    return scored
