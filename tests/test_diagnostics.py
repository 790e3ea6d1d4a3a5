"""Tests for lover_lmeval.apps.diagnostics: AUROC / calibration by hand, group statistics, the cross-fit ceiling."""

from __future__ import annotations

import numpy as np
import pytest
from test_verifier import make_world, planted

from lover_lmeval.core.select.answers import get_extractor
from lover_lmeval.core.decode.branch import Branch
from lover_lmeval.apps.diagnostics import branch_records, cross_fit_supervised, diagnose, pick_shares
from lover_lmeval.core.stats import auroc, expected_calibration_error
from lover_lmeval.core.results import LoverResult

EXTRACT = get_extractor("number")


pytestmark = pytest.mark.usefixtures("one_thread")


def result(answers: list[str], p_pos: list[float], p_neg: list[float]) -> LoverResult:
    branches = [Branch(f"So the answer is {a}.", [1], [0.5], [(0, 1)], "stop") for a in answers]
    return LoverResult(branches, None, {"lover": np.stack([p_pos, p_neg], axis=-1)})


def test_auroc_by_hand():
    """pos {0.9, 0.6} vs neg {0.4, 0.1}: all 4 pairs ordered -> 1.0; one tie -> 1/2;
    pos {0.3} vs neg {0.5, 0.1}: 1 of 2 pairs -> 0.5; a missing class -> None."""
    assert auroc([0.9, 0.4, 0.6, 0.1], [1, 0, 1, 0]) == 1.0
    assert auroc([0.5, 0.5], [1, 0]) == 0.5
    assert auroc([0.3, 0.5, 0.1], [1, 0, 0]) == 0.5
    assert auroc([0.1, 0.9], [0, 0]) is None


def test_expected_calibration_error_by_hand():
    """p = .95, .95 (1 of 2 correct) -> bin 9: |0.5 - 0.95| * 2/4 = 0.225;
    p = .05, .05 (none correct) -> bin 0: |0 - 0.05| * 2/4 = 0.025; total 0.25."""
    assert expected_calibration_error(np.array([0.95, 0.95, 0.05, 0.05]), np.array([1, 0, 0, 0])) == pytest.approx(0.25)
    assert expected_calibration_error(np.array([1.0, 0.0]), np.array([1, 0])) == 0.0


def test_diagnose_group_statistics_by_hand():
    """Q1: answers 7, 7, 3 (gold 3): majority wrong; scores p = (p+ + 1 - p-)/2 = .1, .2, .9 -> top-scored right.
    Q2: answers 5, 5, 5 (gold 4): gold absent. Pooled correct = [0,0,1,0,0,0]; scores [.1,.2,.9,.5,.5,.5]:
    the correct .9 beats all 5 incorrect -> AUROC 1.0; only Q1 has both classes. LoVer(sum) picks 3 (.9 > .1 + .2)
    and 5: two different answers -> top pick share 1/2."""
    results = [result(["7", "7", "3"], [0.1, 0.2, 0.9], [0.9, 0.8, 0.1]),
               result(["5", "5", "5"], [0.5, 0.5, 0.5], [0.5, 0.5, 0.5])]
    diag = diagnose(results, ["3", "4"], EXTRACT)
    assert diag["auroc_pooled"] == 1.0 and diag["auroc_per_question_mean"] == 1.0 and diag["questions_with_both"] == 1
    assert diag["groups_per_question"] == 1.5
    assert (diag["gold_among_answers"], diag["gold_group_largest"], diag["gold_group_top_scored"]) == (0.5, 0.0, 0.5)
    assert diag["branch_accuracy"] == pytest.approx(1 / 6)
    assert diag["mean_score_correct"] == pytest.approx(0.9) and diag["mean_score_incorrect"] == pytest.approx(0.36)
    assert diag["top_pick_share"] == 0.5


def planted_results(n_q: int, seed: int):
    features, _, groups, labels, true_group, _ = planted(n_q, make_world(16), seed=seed, signal=1.0)
    results = [LoverResult([Branch(f"The answer is {int(g)}.", [1], [0.5], [(0, 1)], "stop") for g in row],
                           features[q].numpy()) for q, row in enumerate(groups)]
    return results, [str(int(t)) for t in true_group]


def test_cross_fit_scores_each_fold_with_the_other_folds_labels_only():
    """Scrambling the gold answers of the fold-0 questions must leave fold 0's scores bit-identical (they come
    from a verifier trained on fold 1), and the labelled ceiling must find the planted direction."""
    results, gold = planted_results(40, seed=5)
    scored = cross_fit_supervised(results, gold, "number", folds=2, seed=0)
    fold0 = np.random.default_rng(0).permutation(len(results)) % 2 == 0
    scrambled = [("999" if in_fold0 else g) for g, in_fold0 in zip(gold, fold0)]
    rescored = cross_fit_supervised(results, scrambled, "number", folds=2, seed=0)
    for q in np.flatnonzero(fold0):
        assert np.array_equal(scored[q].verifier_probs["supervised_cv"], rescored[q].verifier_probs["supervised_cv"])
    assert not all(np.array_equal(scored[q].verifier_probs["supervised_cv"], rescored[q].verifier_probs["supervised_cv"])
                   for q in np.flatnonzero(~fold0))
    assert all("supervised_cv" not in r.verifier_probs for r in results)  # inputs untouched
    assert diagnose(scored, gold, EXTRACT, "supervised_cv")["auroc_pooled"] > 0.9


def test_cross_fit_rejects_bad_folds():
    results, gold = planted_results(3, seed=1)
    with pytest.raises(ValueError, match="folds=5"):
        cross_fit_supervised(results, gold, "number", folds=5)


def test_branch_records_by_hand():
    """Q (doc 7, gold 3): answers 7, 3 with p+ = .1, .9 and p- = .9, .1 -> p = (p+ + 1 - p-)/2 = .1, .9;
    each branch's one token (margin .5) covers the answer's span only if the span starts at 0, which it does not
    ("So the answer is 7." puts the answer at 17), so CoT-decoding's confidence is 0 for both."""
    scored = [result(["7", "3"], [0.1, 0.9], [0.9, 0.1])]
    records = branch_records("t", [7], scored, ["3"], EXTRACT, {"lover": scored})
    assert [(r["doc_id"], r["branch"], r["answer"], r["right"]) for r in records] == [(7, 0, "7", False), (7, 1, "3", True)]
    assert [r["lover"] for r in records] == [pytest.approx(0.1), pytest.approx(0.9)]
    assert all(r["finish"] == "stop" and r["tokens"] == 1 and r["confidence"] == 0.0 and r["task"] == "t" for r in records)


def test_pick_shares_name_the_rows_that_answer_one_way():
    """lm-eval's logged samples as `lover compare` reads them (one request a question, `filtered_resps` [[pick]]):

    - greedy: "no" to 19 of 20 answered questions, 2 unanswered ("") -> 0.95 of 20 >= 0.95, one answer;
    - majority: "no" to 12 of 22 -> 0.545..., not one answer;
    - lover_sum: "yes" to all 10 -> 1.0, but 10 < 20 answered questions: too few to call it one answer;
    - a row that answered nothing has no share;
    - after a `take_first` the pick comes bare ("72", not ["72"]): "72", "75" and "7" are three answers (1/3 each),
      not one "7".
    """
    def samples(name: str, picks: list[str]) -> list[dict]:
        return [{"filter": name, "doc_id": i, "filtered_resps": [[pick]]} for i, pick in enumerate(picks)]

    found = pick_shares(samples("greedy", ["no"] * 19 + ["yes"] + [""] * 2)
                        + samples("majority", ["no"] * 12 + ["yes"] * 10)
                        + samples("lover_sum", ["yes"] * 10) + samples("cot_max", [""] * 3)
                        + [{"filter": "first", "doc_id": i, "filtered_resps": [pick]}
                           for i, pick in enumerate(["72", "75", "7"])])
    assert found["greedy"] == {"top_pick_share": 0.95, "answered": 20, "one_answer": True}
    assert found["majority"] == {"top_pick_share": 12 / 22, "answered": 22, "one_answer": False}
    assert found["lover_sum"] == {"top_pick_share": 1.0, "answered": 10, "one_answer": False}
    assert found["cot_max"] == {"top_pick_share": None, "answered": 0, "one_answer": False}
    assert found["first"] == {"top_pick_share": 1 / 3, "answered": 3, "one_answer": False}


def test_accuracy_vs_n_points_grow_logarithmically_past_ten_branches():
    """Every n up to 10, then doubling, then N: N = 1 -> [1]; N = 10 -> 1..10 (the golden's curve); N = 12 -> 1..10, 12;
    N = 64 -> 1..10, 16, 32, 64; N = 100 -> 1..10, 16, 32, 64, 100. The branches refit over the points stay within
    3 N a question (1 + ... + 10 + 16 + 32 + 64 = 167 for N = 64, against 2,080 at every n)."""
    from lover_lmeval.apps.diagnostics import curve_points

    assert curve_points(1) == [1]
    assert curve_points(10) == list(range(1, 11))
    assert curve_points(12) == [*range(1, 11), 12]
    assert curve_points(64) == [*range(1, 11), 16, 32, 64]
    assert curve_points(100) == [*range(1, 11), 16, 32, 64, 100]
    assert all(sum(curve_points(n)) <= 3 * n + 55 for n in range(1, 2000))
