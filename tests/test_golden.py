"""The golden run (tests/golden.py: what it runs, which values it compares exactly and within which tolerances) gives
the outcomes it gave before; a planted change of the comparison's inputs is caught."""

from __future__ import annotations

import json
import os

import torch

from golden import GOLDEN, mismatches


def test_golden_run_is_unchanged(golden_baseline):
    got = golden_baseline[0]
    expected_path = GOLDEN / "expected.json"
    if os.environ.get("LOVER_WRITE_GOLDEN"):
        written_with = {"cpu_capability": torch.backends.cpu.get_cpu_capability(), "torch": torch.__version__,
                        "threads": torch.get_num_threads()}
        expected_path.write_text(json.dumps({**got, "written_with": written_with}, indent=1, sort_keys=True) + "\n")
    expected = json.loads(expected_path.read_text())
    written_with = expected.pop("written_with", None)  # provenance, not an output
    moved = mismatches(got, expected)
    assert not moved, (f"{len(moved)} golden values moved (expected.json written with {written_with}, this run: "
                       f"{torch.backends.cpu.get_cpu_capability()} kernels); if on purpose, regenerate with "
                       f"LOVER_WRITE_GOLDEN=1:\n" + "\n".join(moved[:40]))


def test_mismatches_allow_float_noise_and_chaos_and_catch_every_moved_outcome():
    """The comparison on a hand-made golden (golden.value_class decides each value's rule). Pass: a lover mean score
    0.45 -> 0.49 (< MEAN_SCORE_TOL 0.05), a pooled AUROC 0.55 -> 0.60 (< RANKED_TOL 0.12), a per-question AUROC mean 0.5
    -> 0.35 (< PER_QUESTION_AUROC_TOL 0.25), a tensor rms moved by 1e-4 of itself (< TENSOR_TOL), lover_max's accuracy
    0.125 -> 0.25 and its interval's top 0.375 -> 0.5 (one question of 8: < SHARE_TOL 0.25), a rank check near 0
    changing sign (0.1 -> -0.05) and a wide one shrinking (0.6 -> 0.3), a test-time fit's final loss 0.170 -> 0.175 (<
    FIT_LOSS_TOL 0.25), and each fitted item anywhere in [0, 1]: a trained score 0.03646 -> 0.15, the Xeon's
    supervised_cv score 0.38725 -> 0.00162, lover_sum's pick on a question wrong -> right, supervised_cv_max's pick
    right -> wrong and its accuracy 0.375 -> 0.25 (an Intel Xeon's chaotic cross-fit). Fail, each named by its
    path: majority's pick flipped and its accuracy 0.25 -> 0.25 + 1e-9 (bank: exact), a changed answer, a lover
    score 1.2 (outside [0, 1]), a supervised_cv score NaN, supervised_cv_max's question count 8 -> 7 (a count:
    exact), a mean score 0.45 -> 0.52 (> 0.05), a tensor rms moved by 4% of itself (> TENSOR_TOL 3%), lover_max's
    accuracy 0.125 -> 0.5 (> 0.25), a wide rank check's sign flipped (0.6 -> -0.4) and a test-time fit's final loss
    0.170 -> 0.5 (> 0.25)."""
    expected = {
        "branches": [{"answer": "252", "right": False, "tokens": 231, "confidence": 0.93575, "lover": 0.03646,
                      "trained": 0.03646, "supervised_cv": 0.38725}],
        "per_question": [{"doc_id": 0, "lover_sum": 0, "majority": 1, "supervised_cv_max": 1}],
        "leaderboard": {"tasks": {"t": {
            "rows": {"majority": {"acc": 0.25, "n": 8}, "supervised_cv_max": {"acc": 0.375, "n": 8},
                     "lover_max": {"acc": 0.125, "high": 0.375, "n": 8}},
            "diagnostics": {"lover": {"auroc_pooled": 0.55, "mean_score_correct": 0.45, "auroc_per_question_mean": 0.5},
                            "supervised_cv": {"auroc_pooled": 0.4, "questions": 8}},
            "fit_checks": {"final_losses": {"lover": {"nega": 0.170}},
                           "rank_checks": {"lover": {"vote": 0.1, "confidence": 0.6}, "reversed": []}}}}},
        "checkpoint_tensors": {"mlp.0.weight": {"shape": [100, 576], "dtype": "float32", "mean": 0.0, "rms": 0.05}},
    }
    noisy = json.loads(json.dumps(expected))
    noisy["branches"][0].update(trained=0.15, supervised_cv=0.00162)
    noisy["per_question"][0].update(supervised_cv_max=0, lover_sum=1)
    task = noisy["leaderboard"]["tasks"]["t"]
    task["rows"]["supervised_cv_max"]["acc"] = 0.25
    task["rows"]["lover_max"].update(acc=0.25, high=0.5)
    task["diagnostics"]["lover"].update(auroc_pooled=0.60, mean_score_correct=0.49, auroc_per_question_mean=0.35)
    task["diagnostics"]["supervised_cv"]["auroc_pooled"] = 0.9
    task["fit_checks"]["final_losses"]["lover"]["nega"] = 0.175
    task["fit_checks"]["rank_checks"]["lover"].update(vote=-0.05, confidence=0.3)
    noisy["checkpoint_tensors"]["mlp.0.weight"]["rms"] = 0.05 * (1 + 1e-4)
    assert mismatches(noisy, expected) == []

    moved = json.loads(json.dumps(noisy))
    moved["per_question"][0]["majority"] = 0
    moved["branches"][0].update(answer="250", lover=1.2, supervised_cv=float("nan"))
    task = moved["leaderboard"]["tasks"]["t"]
    task["rows"]["majority"]["acc"] = 0.25 + 1e-9
    task["rows"]["supervised_cv_max"]["n"] = 7
    task["rows"]["lover_max"]["acc"] = 0.5
    task["diagnostics"]["lover"]["mean_score_correct"] = 0.52
    task["fit_checks"]["final_losses"]["lover"]["nega"] = 0.5
    task["fit_checks"]["rank_checks"]["lover"]["confidence"] = -0.4
    moved["checkpoint_tensors"]["mlp.0.weight"]["rms"] = 0.052
    assert [line.split(":")[0] for line in mismatches(moved, expected)] == [
        "branches/0/answer", "branches/0/lover", "branches/0/supervised_cv", "checkpoint_tensors/mlp.0.weight/rms",
        "leaderboard/tasks/t/diagnostics/lover/mean_score_correct",
        "leaderboard/tasks/t/fit_checks/final_losses/lover/nega",
        "leaderboard/tasks/t/fit_checks/rank_checks/lover/confidence", "leaderboard/tasks/t/rows/lover_max/acc",
        "leaderboard/tasks/t/rows/majority/acc", "leaderboard/tasks/t/rows/supervised_cv_max/n",
        "per_question/0/majority"]


def test_a_value_s_class_decides_its_comparison():
    """golden.value_class on the golden's own kinds of path: a pure function of the bank (majority's pick, cot_sum's
    accuracy, a branch's answer, the diagnostics' group counts) is `bank`; what a fitted scorer decides is fitted,
    found by the scorer's name wherever the path names it (a probe's row, a checkpoint's losses, a paired difference
    with LoVer(sum)), and the task's name (lover_gsm8k) names no scorer."""
    from golden import value_class

    task = ("leaderboard", "tasks", "lover_gsm8k")
    assert value_class(("per_question", 0, "majority"), 1, 1) == "bank"
    assert value_class((*task, "rows", "cot_sum", "acc"), 0.25, 0.25) == "bank"
    assert value_class(("branches", 3, "answer"), "18", "18") == "bank"
    assert value_class((*task, "diagnostics", "lover", "groups_per_question"), 5.875, 5.875) == "bank"
    assert value_class(("branches", 3, "confidence"), 0.5, 0.5) == "bank_confidence"
    assert value_class(("per_question", 0, "ccs_max"), 1, 1) == "fitted_item"
    assert value_class((*task, "rows", "pca_sum", "top_pick_share"), 0.25, 0.25) == "fitted_share"
    assert value_class((*task, "rows", "pca_sum", "n"), 8, 8) == "bank"
    assert value_class((*task, "paired", "majority", "diff"), 0.0, 0.0) == "fitted_share"
    assert value_class((*task, "accuracy_vs_n", "lover_sum", 3), 0.25, 0.25) == "fitted_share"
    assert value_class((*task, "accuracy_vs_n", "majority", 3), 0.25, 0.25) == "bank"
    assert value_class((*task, "diagnostics", "trained", "ece"), 0.2, 0.2) == "fitted_ranked"
    assert value_class(("checkpoint_metadata", "final_losses", "nega"), 0.17, 0.17) == "fitted_loss"
    assert value_class(("checkpoint_metadata", "n_questions"), 8, 8) == "bank"
    assert value_class((*task, "rows", "supervised_cv_sum", "acc"), 0.25, 0.25) == "fitted_item"
